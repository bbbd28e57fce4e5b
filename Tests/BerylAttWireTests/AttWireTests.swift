import BerylAttWire
import BerylCore
import BerylGATT
import BerylSMP
import BerylWire
import Foundation
import XCTest

/// attd's stateless proto ⇄ core translation: what its GATT client found and what its security manager says reach
/// its clients with every field in place.
final class AttWireTests: XCTestCase {
    private let heartRate = DiscoveredService(start: 0x10, end: 0x18, uuid: BluetoothUUID(0x180D))
    private let measurement = DiscoveredCharacteristic(declaration: 0x11, properties: CharacteristicProperties(rawValue: 0x10), valueHandle: 0x12,
                                                       uuid: BluetoothUUID(0x2A37))
    private let cccd = DiscoveredDescriptor(handle: 0x13, uuid: BluetoothUUID(0x2902))
    private let battery = DiscoveredInclude(declaration: 0x14, start: 0x20, end: 0x24, uuid: BluetoothUUID(0x180F))

    func testAWholeDiscoveryKeepsEachServicesTree() {
        let database = Beryl_Ipc_V1_GattDatabase([DiscoveredServiceTree(
            service: heartRate, included: [battery], characteristics: [DiscoveredCharacteristicTree(characteristic: measurement, descriptors: [cccd])])])
        XCTAssertEqual(database.services.count, 1)
        let service = database.services[0]
        XCTAssertEqual(service.uuid, BluetoothUUID(0x180D).description)
        XCTAssertEqual(service.startHandle...service.endHandle, 0x10...0x18)
        XCTAssertEqual(service.included, [.with { $0.uuid = BluetoothUUID(0x180F).description; $0.startHandle = 0x20; $0.endHandle = 0x24 }])
        XCTAssertEqual(service.characteristics, [.with {
            $0.uuid = BluetoothUUID(0x2A37).description; $0.properties = 0x10; $0.valueHandle = 0x12
            $0.descriptors = [.with { $0.uuid = BluetoothUUID(0x2902).description; $0.handle = 0x13 }]
        }])
    }

    func testEachDepthAnswersAsTheOneServiceSpanningTheRange() {
        let included = Beryl_Ipc_V1_GattDatabase(included: [battery], in: 0x10...0x18)
        XCTAssertEqual(included.services.map { $0.startHandle...$0.endHandle }, [0x10...0x18])
        XCTAssertEqual(included.services.first?.included.map(\.startHandle), [0x20])
        XCTAssertTrue(included.services.first?.uuid.isEmpty ?? false, "the range's service is the app's to know")

        let characteristics = Beryl_Ipc_V1_GattDatabase(characteristics: [measurement], in: 0x10...0x18)
        XCTAssertEqual(characteristics.services.first?.characteristics.map(\.valueHandle), [0x12])
        XCTAssertEqual(characteristics.services.first?.characteristics.map(\.properties), [0x10])

        let descriptors = Beryl_Ipc_V1_GattDatabase(descriptors: [cccd])
        XCTAssertEqual(descriptors.services.first?.characteristics.first?.descriptors.map(\.handle), [0x13])
    }

    func testSecurityOutcomesKeepTheirCodes() {
        let peer = DeviceAddress("C0:11:22:33:44:55/random")!
        let summary = SecuritySummary(level: LinkSecurity(encrypted: true, authenticated: false, bonded: true), secureConnections: true, keySize: 16, identity: peer)
        XCTAssertEqual(Beryl_Ipc_V1_Paired(summary), .with {
            $0.encrypted = true; $0.bonded = true; $0.secureConnections = true; $0.keySize = 16; $0.identity = peer.description
        })
        let legacy = SecuritySummary(level: LinkSecurity(encrypted: false, authenticated: true, bonded: false), secureConnections: false, keySize: 7, identity: nil)
        XCTAssertEqual(Beryl_Ipc_V1_Paired(legacy), .with { $0.authenticated = true; $0.keySize = 7 })
        XCTAssertEqual(RemoteDetail(SecurityFailure.pairing(.remote(.confirmValueFailed))), RemoteDetail(smpReason: 0x04, smpReasonFromPeer: true))
        XCTAssertEqual(RemoteDetail(SecurityFailure.pairing(.local(.pairingNotSupported))), RemoteDetail(smpReason: 0x05))
        XCTAssertEqual(RemoteDetail(SecurityFailure.encryption(status: 0x06)), RemoteDetail(bluetoothError: .peerRemovedPairingInformation, hciStatus: 0x06))
        XCTAssertEqual(RemoteDetail(SecurityFailure.encryption(status: 0x3D)), RemoteDetail(bluetoothError: .unspecified, hciStatus: 0x3D))
        XCTAssertEqual(RemoteDetail(SecurityFailure.linkClosed), RemoteDetail(bluetoothError: .peripheralDisconnected))

        let timedOut = Beryl_Ipc_V1_PairingFinished(link: 0x40, peer: peer, .failure(.timeout))
        XCTAssertEqual([timedOut.connectionHandle, timedOut.reason], [0x40, 0xFF])
        XCTAssertFalse(timedOut.success)
        let refused = Beryl_Ipc_V1_PairingFinished(link: 0x40, peer: peer, .failure(.remote(.repeatedAttempts)))
        XCTAssertEqual(refused.reason, 0x09)
        XCTAssertTrue(refused.remote)
        XCTAssertEqual(Beryl_Ipc_V1_PairingFinished(link: 0x40, peer: peer, .success(summary)).result, Beryl_Ipc_V1_Paired(summary))
        let ours = Beryl_Ipc_V1_PairingFinished(link: 0x41, peer: peer, .failure(.local(.pairingNotSupported)))
        XCTAssertEqual(ours, .with { $0.connectionHandle = 0x41; $0.peer = peer.description; $0.reason = 0x05 }, "we sent it: not remote")

        XCTAssertEqual(Beryl_Ipc_V1_PairingPrompt(link: 0x40, peer: peer, .confirmNumber(123456)),
                       .with { $0.connectionHandle = 0x40; $0.peer = peer.description; $0.kind = .confirmNumber; $0.number = 123456 })
        XCTAssertEqual(Beryl_Ipc_V1_PairingPrompt(link: 0x40, peer: peer, .displayPasskey(654321)),
                       .with { $0.connectionHandle = 0x40; $0.peer = peer.description; $0.kind = .displayPasskey; $0.number = 654321 })
        XCTAssertEqual(Beryl_Ipc_V1_PairingPrompt(link: 0x40, peer: peer, .enterPasskey).kind, .enterPasskey)
        XCTAssertEqual(Beryl_Ipc_V1_PairingPrompt(link: 0x40, peer: peer, .confirmPairing).kind, .confirmPairing)
    }

    func testKeyEncryptionOutcomesTravelWithTheirHCICode() {
        XCTAssertEqual(Beryl_Ipc_V1_KeyEncryption(.encrypted), .with { $0.outcome = .encrypted })
        XCTAssertEqual(Beryl_Ipc_V1_KeyEncryption(.keyMissing), .with { $0.outcome = .keyMissing; $0.hciCode = 0x06 })
        XCTAssertEqual(Beryl_Ipc_V1_KeyEncryption(.failed(status: 0x3D)), .with { $0.outcome = .failed; $0.hciCode = 0x3D })
        XCTAssertEqual(Beryl_Ipc_V1_KeyEncryption(.linkClosed(reason: 0x3D)), .with { $0.outcome = .linkClosed; $0.hciCode = 0x3D })
        XCTAssertEqual(Beryl_Ipc_V1_KeyEncryption(.linkClosed(reason: nil)).hciCode, 0, "no reason came")
    }

    func testABondsInfoKeepsEachKeyAndItsTally() {
        let peer = DeviceAddress("C0:11:22:33:44:55/random")!
        let bond = Bond(identity: peer, irk: [UInt8](repeating: 1, count: 16), authenticated: false, secureConnections: true, keySize: 12)
        XCTAssertEqual(Beryl_Ipc_V1_BondInfo(bond, subscriptions: 3, keyEncryptions: nil), .with {
            $0.identity = peer.description; $0.secureConnections = true; $0.keySize = 12; $0.irkKnown = true; $0.subscriptions = 3
        })
        let signing = Bond(identity: peer, csrk: [UInt8](repeating: 2, count: 16), authenticated: true, secureConnections: false)
        let info = Beryl_Ipc_V1_BondInfo(signing, subscriptions: 0, keyEncryptions: KeyEncryptionTally(started: 2, last: .keyMissing))
        XCTAssertEqual([info.authenticated, info.secureConnections, info.irkKnown, info.csrkKnown], [true, false, false, true])
        XCTAssertEqual(info.keyEncryptions, 2)
        XCTAssertEqual(info.lastKeyEncryption, .with { $0.outcome = .keyMissing; $0.hciCode = 0x06 })
        XCTAssertFalse(Beryl_Ipc_V1_BondInfo(signing, subscriptions: 0, keyEncryptions: KeyEncryptionTally(started: 1)).hasLastKeyEncryption,
                       "started, not yet ended")
    }
}
