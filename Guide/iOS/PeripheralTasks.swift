// The Core Bluetooth Programming Guide, "Performing Common Peripheral Role Tasks", in Swift as written for iOS.
// Built as is after Guide/rename.sed; nothing here may name a Beryl type.
import CoreBluetooth
import Foundation

let thermometerNameCharacteristicUUID = CBUUID(string: "2A00")
/// The thermostat's own ATT error: a set point out of range (application errors are 0x80–0x9F).
let setPointOutOfRange = CBATTError.Code(rawValue: 0x80)!

class PeripheralTasks: NSObject, CBPeripheralManagerDelegate {
    var myPeripheralManager: CBPeripheralManager!
    var myCharacteristic: CBMutableCharacteristic!
    var myService: CBMutableService!

    override init() {
        super.init()
        // Starting Up a Peripheral Manager
        myPeripheralManager = CBPeripheralManager(delegate: self, queue: nil, options: nil)
    }

    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) {
        guard peripheral.state == .poweredOn else {
            print("Peripheral state \(peripheral.state.rawValue)")
            return
        }
        // Setting Up Your Services and Characteristics: a dynamic value (nil), read, written and notified...
        myCharacteristic = CBMutableCharacteristic(type: temperatureCharacteristicUUID,
                                                   properties: [.read, .write, .notify],
                                                   value: nil, permissions: [.readable, .writeable])
        // ...and a cached one, served by the stack.
        let myName = CBMutableCharacteristic(type: thermometerNameCharacteristicUUID, properties: [.read],
                                             value: Data("Thermometer".utf8), permissions: [.readable])
        myService = CBMutableService(type: thermometerServiceUUID, primary: true)
        myService.characteristics = [myCharacteristic, myName]
        // Publishing Your Services and Characteristics
        myPeripheralManager.add(myService)
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didAdd service: CBService, error: Error?) {
        if let error = error {
            print("Error publishing service: \(error.localizedDescription)")
            return
        }
        print("Published service \(service.uuid.uuidString)")
        myCharacteristic.value = Data("20.0".utf8)
        // Advertising Your Services
        myPeripheralManager.startAdvertising([CBAdvertisementDataServiceUUIDsKey: [myService.uuid],
                                              CBAdvertisementDataLocalNameKey: "Thermometer"])
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: CBPeripheralManager, error: Error?) {
        if let error = error {
            print("Error advertising: \(error.localizedDescription)")
            return
        }
        print("Advertising")
    }

    // Responding to Read and Write Requests from a Connected Central
    func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveRead request: CBATTRequest) {
        guard request.characteristic.uuid == myCharacteristic.uuid, let value = myCharacteristic.value else {
            myPeripheralManager.respond(to: request, withResult: .attributeNotFound)
            return
        }
        if request.offset > value.count {
            myPeripheralManager.respond(to: request, withResult: .invalidOffset)
            return
        }
        request.value = value.subdata(in: request.offset..<value.count)
        myPeripheralManager.respond(to: request, withResult: .success)
        print("Answered a read")
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        guard let request = requests.first, let value = request.value else { return }
        guard let setPoint = Double(String(decoding: value, as: UTF8.self)), (5.0...30.0).contains(setPoint) else {
            myPeripheralManager.respond(to: request, withResult: setPointOutOfRange)
            print("Refused set point")
            return
        }
        myCharacteristic.value = value
        myPeripheralManager.respond(to: request, withResult: .success)
        print("Set point \(setPoint)")
    }

    // Sending Updated Characteristic Values to Subscribed Centrals
    func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didSubscribeTo characteristic: CBCharacteristic) {
        print("Central subscribed to characteristic \(characteristic.uuid.uuidString)")
        let updatedValue = Data("20.5".utf8)
        let didSendValue = myPeripheralManager.updateValue(updatedValue, for: myCharacteristic, onSubscribedCentrals: nil)
        print("Sent update: \(didSendValue)")
    }

    func peripheralManagerIsReady(toUpdateSubscribers peripheral: CBPeripheralManager) {
        print("Ready to update subscribers")
    }
}
