// swift-tools-version: 6.1
import PackageDescription

// libFuzzer targets for the protocol cores that parse what remote devices send, and the JSON reader of the files
// people write for the daemons. Build and run with Fuzz/run.sh.
let package = Package(
    name: "BerylFuzz",
    dependencies: [.package(name: "Beryl", path: "..")],
    targets: [
        .executableTarget(name: "FuzzATTServer", dependencies: [.product(name: "BerylProtocols", package: "Beryl")]),
        .executableTarget(name: "FuzzL2CAP", dependencies: [.product(name: "BerylProtocols", package: "Beryl")]),
        // LE credit-based and enhanced credit-based signalling, and K-frames, as a peer sends them.
        .executableTarget(name: "FuzzCreditBased", dependencies: [.product(name: "BerylProtocols", package: "Beryl")]),
        // Adapter profiles and app manifests: the JSON reader the daemons use instead of Foundation's JSONSerialization.
        .executableTarget(name: "FuzzJSONValue", dependencies: [.product(name: "BerylProtocols", package: "Beryl")]),
    ]
)
