// swift-tools-version: 6.1
import PackageDescription

// libFuzzer targets for the protocol cores that parse what remote devices send. Build and run with Fuzz/run.sh.
let package = Package(
    name: "BerylFuzz",
    dependencies: [.package(name: "Beryl", path: "..")],
    targets: [
        .executableTarget(name: "FuzzATTServer", dependencies: [.product(name: "BerylProtocols", package: "Beryl")]),
        .executableTarget(name: "FuzzL2CAP", dependencies: [.product(name: "BerylProtocols", package: "Beryl")]),
    ]
)
