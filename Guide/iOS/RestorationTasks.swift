// The Core Bluetooth Programming Guide, "Core Bluetooth Background Processing for iOS Apps": state preservation
// and restoration, in Swift as written for iOS. Built as is after Guide/rename.sed; nothing here may name a Beryl
// type. The app delegate's didFinishLaunching hands this class its launch options.
import CoreBluetooth
import Foundation

class RestorationTasks: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate {
    var myCentralManager: CBCentralManager!
    var thermometer: CBPeripheral?

    init(launchOptions: [String: Any]?) {
        super.init()
        // Reinstantiate Your Central and Peripheral Managers
        let centralManagerIdentifiers = launchOptions?[UIApplicationLaunchOptionsBluetoothCentralsKey] as? [String] ?? []
        print("Launched to restore [\(centralManagerIdentifiers.joined(separator: ", "))]")
        // Opt In to State Preservation and Restoration
        myCentralManager = CBCentralManager(delegate: self, queue: nil,
                                            options: [CBCentralManagerOptionRestoreIdentifierKey: "myCentralManagerIdentifier"])
    }

    // Implement the Appropriate Restoration Delegate Method
    func centralManager(_ central: CBCentralManager, willRestoreState dict: [String: Any]) {
        let peripherals = dict[CBCentralManagerRestoredStatePeripheralsKey] as? [CBPeripheral] ?? []
        print("Restoring \(peripherals.count) peripherals")
        for peripheral in peripherals {
            peripheral.delegate = self
            thermometer = peripheral
        }
    }

    // Update Your Initialization Process
    func centralManagerDidUpdateState(_ central: CBCentralManager) {
        guard central.state == .poweredOn else { return }
        if let thermometer = thermometer {
            print("Restored peripheral is \(thermometer.state == .connected ? "connected" : "not connected yet")")
            if thermometer.state == .connected { resume(thermometer) }
            return
        }
        central.scanForPeripherals(withServices: [thermometerServiceUUID], options: nil)
    }

    func centralManager(_ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
                        advertisementData: [String: Any], rssi RSSI: NSNumber) {
        thermometer = peripheral
        central.stopScan()
        central.connect(peripheral, options: nil)
    }

    func centralManager(_ central: CBCentralManager, didConnect peripheral: CBPeripheral) {
        print("Connected")
        peripheral.delegate = self
        resume(peripheral)
    }

    func centralManager(_ central: CBCentralManager, didDisconnectPeripheral peripheral: CBPeripheral, error: Error?) {
        print("Disconnected")
        // A connection request never times out: it completes when the thermometer is back.
        central.connect(peripheral, options: nil)
    }

    /// What was discovered before, in this process or in the one the system ended, is used as it is.
    func resume(_ peripheral: CBPeripheral) {
        let service = peripheral.services?.first { $0.uuid == thermometerServiceUUID }
        if let characteristic = service?.characteristics?.first(where: { $0.uuid == temperatureCharacteristicUUID }) {
            print("Resumed without discovery")
            peripheral.readValue(for: characteristic)
        } else {
            peripheral.discoverServices([thermometerServiceUUID])
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverServices error: Error?) {
        for service in peripheral.services ?? [] where service.uuid == thermometerServiceUUID {
            peripheral.discoverCharacteristics([temperatureCharacteristicUUID], for: service)
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverCharacteristicsFor service: CBService, error: Error?) {
        for characteristic in service.characteristics ?? [] {
            peripheral.readValue(for: characteristic)
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor characteristic: CBCharacteristic, error: Error?) {
        if let error = error {
            print("Error reading: \(error.localizedDescription)")
            return
        }
        print("Temperature \(String(decoding: characteristic.value ?? Data(), as: UTF8.self))")
    }
}
