# The mechanical rename from Core Bluetooth to Beryl, applied to Guide/iOS at build time (and nothing else adapted):
# CBUUID becomes BluetoothUUID (Foundation owns UUID), CBError BluetoothError (Swift owns Error), every other CB
# prefix goes, and UIKit's launch option keys lose their UI.
s/^import CoreBluetooth$/import Beryl/
s/\<CBUUID\>/BluetoothUUID/g
s/\<CBError\>/BluetoothError/g
s/\<CB([A-Z][A-Za-z0-9_]*)/\1/g
s/\<UIApplicationLaunchOptions([A-Za-z]*)Key\>/ApplicationLaunchOptions\1Key/g
