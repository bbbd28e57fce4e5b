// Beryl's launcher for the guide's listings (Guide/iOS, renamed at build time): `guide-listings
// central|peripheral|restoring-central [--runtime-dir DIR]`. This file is not a listing; it plays the part of an iOS
// app's launch, handing the launch options managerd gave the process to the listing as didFinishLaunching would.
import Beryl
import Foundation

let arguments = CommandLine.arguments
if let flag = arguments.firstIndex(of: "--runtime-dir"), flag + 1 < arguments.count {
    setenv("BERYL_RUNTIME_DIR", arguments[flag + 1], 1)
}

var listings: [NSObject] = []
switch arguments.dropFirst().first {
case "central": listings.append(CentralTasks())
case "peripheral": listings.append(PeripheralTasks())
case "restoring-central": listings.append(RestorationTasks(launchOptions: LaunchOptions.current.dictionary))
default:
    FileHandle.standardError.write(Data("usage: guide-listings central|peripheral|restoring-central [--runtime-dir DIR]\n".utf8))
    exit(64)
}
dispatchMain()
