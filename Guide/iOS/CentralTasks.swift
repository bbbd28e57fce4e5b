// The Core Bluetooth Programming Guide, "Performing Common Central Role Tasks", in Swift as written for iOS.
// Built as is after Guide/rename.sed; nothing here may name a Beryl type.
import CoreBluetooth
import Foundation

let thermometerServiceUUID = CBUUID(string: "71DA3FD1-7E10-41C1-B16F-4430B506CDE7")
let temperatureCharacteristicUUID = CBUUID(string: "71DA3FD2-7E10-41C1-B16F-4430B506CDE7")

class CentralTasks: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate {
    var myCentralManager: CBCentralManager!
    var discoveredPeripheral: CBPeripheral?
    var interestingCharacteristic: CBCharacteristic?
    var notificationsSeen = 0
    var writesDone = 0

    override init() {
        super.init()
        // Starting Up a Central Manager
        myCentralManager = CBCentralManager(delegate: self, queue: nil, options: nil)
    }

    func centralManagerDidUpdateState(_ central: CBCentralManager) {
        switch central.state {
        case .poweredOn:
            // Discovering Peripheral Devices That Are Advertising, only those with the service (Best Practices)
            print("Central powered on; scanning")
            myCentralManager.scanForPeripherals(withServices: [thermometerServiceUUID],
                                                options: [CBCentralManagerScanOptionAllowDuplicatesKey: false])
        case .resetting, .unsupported, .unauthorized, .poweredOff, .unknown:
            print("Central state \(central.state.rawValue)")
        @unknown default:
            print("Central state unknown")
        }
    }

    func centralManager(_ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
                        advertisementData: [String: Any], rssi RSSI: NSNumber) {
        let name = advertisementData[CBAdvertisementDataLocalNameKey] as? String ?? peripheral.name ?? "?"
        print("Discovered \(name) at \(RSSI.intValue) dBm")
        // Keep a strong reference, or the peripheral goes away before it is connected.
        discoveredPeripheral = peripheral
        myCentralManager.stopScan()
        print("Scanning stopped")
        // Connecting to a Peripheral Device After You've Discovered It
        myCentralManager.connect(peripheral, options: nil)
    }

    func centralManager(_ central: CBCentralManager, didConnect peripheral: CBPeripheral) {
        print("Peripheral connected")
        peripheral.delegate = self
        // Discovering the Services of a Peripheral That You're Connected To
        peripheral.discoverServices([thermometerServiceUUID])
    }

    func centralManager(_ central: CBCentralManager, didFailToConnect peripheral: CBPeripheral, error: Error?) {
        print("Failed to connect: \(error?.localizedDescription ?? "no error")")
    }

    func centralManager(_ central: CBCentralManager, didDisconnectPeripheral peripheral: CBPeripheral, error: Error?) {
        print("Disconnected")
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverServices error: Error?) {
        for service in peripheral.services ?? [] {
            print("Discovered service \(service.uuid.uuidString)")
            // Discovering the Characteristics of a Service
            peripheral.discoverCharacteristics([temperatureCharacteristicUUID], for: service)
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverCharacteristicsFor service: CBService, error: Error?) {
        for characteristic in service.characteristics ?? [] {
            print("Discovered characteristic \(characteristic.uuid.uuidString)")
            interestingCharacteristic = characteristic
            // Reading the Value of a Characteristic
            if characteristic.properties.contains(.read) {
                peripheral.readValue(for: characteristic)
            }
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor characteristic: CBCharacteristic, error: Error?) {
        if let error = error {
            print("Error reading characteristic value: \(error.localizedDescription)")
            return
        }
        let data = characteristic.value ?? Data()
        let temperature = String(decoding: data, as: UTF8.self)
        if characteristic.isNotifying {
            notificationsSeen += 1
            print("Notified temperature \(temperature)")
            if notificationsSeen == 1 {
                // Writing the Value of a Characteristic
                peripheral.writeValue(Data("21.5".utf8), for: characteristic, type: .withResponse)
            }
        } else {
            print("Read temperature \(temperature)")
            // Subscribing to a Characteristic's Value
            peripheral.setNotifyValue(true, for: characteristic)
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateNotificationStateFor characteristic: CBCharacteristic, error: Error?) {
        if let error = error {
            print("Error changing notification state: \(error.localizedDescription)")
        } else {
            print("Notifying \(characteristic.isNotifying)")
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didWriteValueFor characteristic: CBCharacteristic, error: Error?) {
        writesDone += 1
        if let error = error as? CBATTError {
            // The thermostat refuses a set point out of its range with its own application error.
            print("Write refused with ATT error 0x\(String(error.code.rawValue, radix: 16))")
            print("Central done")
        } else if let error = error {
            print("Error writing characteristic value: \(error.localizedDescription)")
        } else {
            print("Wrote set point")
            peripheral.writeValue(Data("99.0".utf8), for: characteristic, type: .withResponse)
        }
    }
}
