// swift-tools-version: 6.1
import PackageDescription

// Layers point down: Core ← Wire ← (EventLoop, IPC, Transport) ← DaemonKit ← (Supervisor, Tools, Bench) ← executables.
// Protocol layers (HCI, L2CAP, ATT, GATT, SMP) and policy cores (Manager) are sans-IO targets above Core; the Beryl
// library apps link stands on Core and Wire alone.
let package = Package(
    name: "Beryl",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "hcid", targets: ["hcid"]),
        .executable(name: "attd", targets: ["attd"]),
        .executable(name: "managerd", targets: ["managerd"]),
        .executable(name: "berylsim", targets: ["berylsim"]),
        .executable(name: "beryl", targets: ["beryl"]),
        // Device labs: Google's Pandora gRPC interfaces over a lab session; gRPC and SwiftNIO stay in this one.
        .executable(name: "beryl-pandora", targets: ["beryl-pandora"]),
        .executable(name: "heart-rate-peripheral", targets: ["HeartRatePeripheral"]),
        .executable(name: "heart-rate-central", targets: ["HeartRateCentral"]),
        .executable(name: "thermostat", targets: ["Thermostat"]),
        .executable(name: "door-lock-central", targets: ["DoorLockCentral"]),
        .executable(name: "doorlock", targets: ["DoorLock"]),
        // The Core Bluetooth Programming Guide's listings, written for iOS and renamed at build time (Guide/).
        .executable(name: "guide-listings", targets: ["GuideListings"]),
        // The sans-IO protocol cores, for the fuzz package in Fuzz/ (and anyone embedding them).
        // What apps import: Core Bluetooth's managers for Linux.
        .library(name: "Beryl", targets: ["Beryl"]),
        .library(name: "BerylProtocols", targets: ["BerylCore", "BerylHCI", "BerylL2CAP", "BerylATT", "BerylGATT", "BerylLink", "BerylSMP"]),
    ],
    dependencies: [
        // Without its default BinaryDelimitedStreams trait SwiftProtobuf needs FoundationEssentials only, not the whole of
        // Foundation with ICU (39 MB of data): the daemons load neither (docs/results/2026-12-07-ci-stages-demo-footprint.md).
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0", traits: []),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/grpc/grpc-swift-2.git", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport.git", from: "2.9.2"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf.git", from: "2.4.1"),
    ],
    targets: [
        // System libraries (Debian: libbluetooth-dev, libsqlite3-dev); libevent-dev through CBerylEvent.
        .systemLibrary(name: "CBluetooth", pkgConfig: "bluez", providers: [.apt(["libbluetooth-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .target(name: "CBerylSys"),
        .target(name: "CBerylEvent", linkerSettings: [.linkedLibrary("event")]),

        .target(name: "CBerylCrypto", linkerSettings: [.linkedLibrary("crypto")]),
        // Only libbluetooth's headers (sockaddr_hci, HCIDEVDOWN): the user channel needs no library code.
        .target(name: "CBerylHCISocket"),

        .target(name: "BerylCore"),
        .target(name: "BerylHCI", dependencies: ["BerylCore"]),
        .target(name: "BerylCrypto", dependencies: ["CBerylCrypto"]),
        .target(name: "BerylSMP", dependencies: ["BerylCore", "BerylCrypto"]),
        .target(name: "BerylStore", dependencies: ["BerylCore", "BerylCrypto", "BerylSMP", "CSQLite"]),
        .target(name: "BerylGAP", dependencies: ["BerylCore", "BerylHCI"]),
        .target(name: "BerylManager", dependencies: ["BerylCore", "BerylGAP"]),
        .target(name: "Beryl", dependencies: ["BerylCore", "BerylWire"]),
        // managerd's translation between its cores' values and the wire's messages.
        .target(name: "BerylManagerWire", dependencies: ["BerylManager", "BerylGAP", "BerylStore", "BerylWire", "BerylCore"]),
        // attd's proto ⇄ core values (GATT discovery results, security outcomes), as BerylManagerWire is managerd's.
        .target(name: "BerylAttWire", dependencies: ["BerylGATT", "BerylLink", "BerylSMP", "BerylHCI", "BerylWire", "BerylCore"]),
        .target(name: "BerylSim", dependencies: ["BerylCore", "BerylHCI", "CBerylCrypto"]),
        .target(name: "BerylL2CAP", dependencies: ["BerylCore", "BerylHCI"]),
        .target(name: "BerylATT", dependencies: ["BerylCore"]),
        .target(name: "BerylGATT", dependencies: ["BerylCore", "BerylATT", "BerylCrypto"]),
        // One LE link's composite: L2CAP reassembly, ATT server and client, signalling; SMP PDUs are handed out.
        .target(name: "BerylLink", dependencies: ["BerylCore", "BerylATT", "BerylGATT", "BerylL2CAP", "BerylHCI"]),
        .target(name: "BerylEventLoop", dependencies: ["CBerylEvent"]),
        // The wire: generated messages, the envelope, the socket and a blocking client; what apps link.
        .target(name: "BerylWire", dependencies: [
            "BerylCore", "CBerylSys",
            .product(name: "SwiftProtobuf", package: "swift-protobuf"),
        ]),
        // The daemons' side of the wire, on the event loop.
        .target(name: "BerylIPC", dependencies: ["BerylWire", "BerylCore", "BerylEventLoop", "CBerylSys", .product(name: "SwiftProtobuf", package: "swift-protobuf")]),
        .target(name: "BerylTransport", dependencies: ["BerylCore", "CBerylSys", "CBerylHCISocket"]),
        .target(name: "BerylHardware", dependencies: ["BerylCore", "BerylHCI", "BerylTransport"]),
        .target(name: "BerylDaemonKit", dependencies: [
            "BerylCore", "BerylEventLoop", "BerylIPC", "CBerylSys",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        // Running the stack from outside: the supervisor, start/stop and probes, scratch directories, tool runs.
        .target(name: "BerylSupervisor", dependencies: ["BerylCore", "BerylDaemonKit", "BerylIPC", "BerylEventLoop", "BerylHCI"]),
        // What the beryl tool's serve, gatt and pair commands are, as clients of the daemons.
        .target(name: "BerylTools", dependencies: ["BerylCore", "BerylDaemonKit", "BerylIPC", "BerylEventLoop", "BerylHCI", "BerylSupervisor"]),
        // beryl bench's measurements (no daemon links them).
        .target(name: "BerylBench", dependencies: ["BerylCore", "BerylDaemonKit", "BerylIPC", "BerylHCI", "BerylSim", "BerylSupervisor", "BerylTools", "CBerylSys"]),
        // The fault-injection suite: full stacks on berylsim, faults at phases, invariants after each.
        .target(name: "BerylFaults", dependencies: ["BerylCore", "BerylDaemonKit", "BerylIPC", "BerylSim", "BerylSupervisor", "BerylBench"]),

        .executableTarget(name: "hcid", dependencies: [
            "BerylDaemonKit", "BerylTransport", "BerylHCI", "BerylHardware",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "attd", dependencies: [
            "BerylDaemonKit", "BerylGATT", "BerylLink", "BerylHCI", "BerylSMP", "BerylAttWire", "BerylStore", "BerylCrypto", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "managerd", dependencies: [
            "BerylDaemonKit", "BerylManager", "BerylManagerWire", "BerylGAP", "BerylHCI", "BerylStore", "BerylEventLoop", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "berylsim", dependencies: [
            "BerylDaemonKit", "BerylSim", "BerylTransport", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "beryl", dependencies: [
            "BerylSupervisor", "BerylTools", "BerylBench", "BerylFaults", "BerylTransport", "BerylSim", "BerylHCI", "BerylSMP", "BerylStore", "Beryl", "CBerylSys", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),

        // Pandora (bt-test-interfaces), generated by proto/pandora/generate.sh; the services that serve it from a lab session.
        .target(name: "PandoraInterfaces", dependencies: [
            .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            .product(name: "GRPCCore", package: "grpc-swift-2"),
            .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf"),
        ]),
        .target(name: "BerylPandora", dependencies: [
            "BerylCore", "BerylIPC", "PandoraInterfaces", "CBerylSys",
            .product(name: "GRPCCore", package: "grpc-swift-2"),
        ]),
        .executableTarget(name: "beryl-pandora", dependencies: [
            "BerylPandora", "BerylDaemonKit",
            .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),

        // Examples written as the Core Bluetooth Programming Guide's code is, against the Beryl library.
        // What the examples report, as text or (--json) one JSON object per line.
        .target(name: "ExampleReports", path: "Examples/ExampleReports"),
        .executableTarget(name: "HeartRatePeripheral", dependencies: ["Beryl", "ExampleReports"], path: "Examples/HeartRatePeripheral"),
        .executableTarget(name: "HeartRateCentral", dependencies: ["Beryl", "ExampleReports"], path: "Examples/HeartRateCentral"),
        .executableTarget(name: "Thermostat", dependencies: ["Beryl", "ExampleReports"], path: "Examples/Thermostat"),
        .executableTarget(name: "DoorLockCentral", dependencies: ["Beryl", "ExampleReports"], path: "Examples/DoorLockCentral"),
        .executableTarget(name: "DoorLock", dependencies: ["Beryl"], path: "Examples/DoorLock"),
        // Swift 6 language mode, as every target here; a warning in the guide's code fails the build.
        .executableTarget(name: "GuideListings", dependencies: ["Beryl"], path: "Guide/App",
                          swiftSettings: [.unsafeFlags(["-warnings-as-errors"])], plugins: ["GuideRename"]),
        .plugin(name: "GuideRename", capability: .buildTool(), path: "Plugins/GuideRename"),

        // What the process tests share (stacks on berylsim, requests, waits); linked by tests only.
        .target(name: "BerylTestSupport", dependencies: ["BerylSupervisor", "BerylDaemonKit", "BerylWire"], path: "Tests/BerylTestSupport"),

        .testTarget(name: "BerylCoreTests", dependencies: ["BerylCore"]),
        .testTarget(name: "BerylATTTests", dependencies: ["BerylATT", "BerylCore"]),
        .testTarget(name: "BerylGAPTests", dependencies: ["BerylGAP", "BerylCore", "BerylHCI"]),
        .testTarget(name: "BerylStoreTests", dependencies: ["BerylStore", "BerylGAP", "BerylSMP", "BerylCrypto", "BerylCore"]),
        .testTarget(name: "BerylTransportTests", dependencies: ["BerylTransport"]),
        .testTarget(name: "BerylHardwareTests", dependencies: ["BerylHardware", "BerylTransport", "BerylHCI", "BerylCore"]),
        .testTarget(name: "BerylWireTests", dependencies: ["BerylWire"]),
        .testTarget(name: "BerylIPCTests", dependencies: ["BerylIPC", "BerylWire", "BerylEventLoop", "BerylCore"]),
        .testTarget(name: "BerylSupervisorTests", dependencies: ["BerylSupervisor", "BerylDaemonKit"]),
        .testTarget(name: "BerylBenchTests", dependencies: ["BerylBench"]),
        .testTarget(name: "ExampleReportsTests", dependencies: ["ExampleReports"]),
        .testTarget(name: "BerylToolsTests", dependencies: ["BerylTools", "BerylIPC", "BerylCore"]),
        .testTarget(name: "BerylDaemonKitTests", dependencies: ["BerylDaemonKit"]),
        .testTarget(name: "BerylEventLoopTests", dependencies: ["BerylEventLoop"]),
        .testTarget(name: "BerylCryptoTests", dependencies: ["BerylCrypto", "BerylCore"]),
        .testTarget(name: "BerylSMPTests", dependencies: ["BerylSMP", "BerylCrypto", "BerylCore"]),
        .testTarget(name: "BerylTests", dependencies: ["Beryl", "BerylIPC", "BerylSupervisor", "BerylDaemonKit", "BerylStore", "BerylManagerWire", "BerylTestSupport"]),
        .testTarget(name: "BerylFaultsTests", dependencies: ["BerylFaults", "BerylSupervisor"]),
        .testTarget(name: "BerylManagerTests", dependencies: ["BerylManager", "BerylGAP", "BerylCore", "BerylHCI", "BerylStore"]),
        .testTarget(name: "BerylSimTests", dependencies: ["BerylSim", "BerylCore"]),
        .testTarget(name: "BerylGATTTests", dependencies: ["BerylGATT", "BerylATT", "BerylCore", "BerylCrypto"]),
        .testTarget(name: "BerylLinkTests", dependencies: ["BerylLink", "BerylGATT", "BerylATT", "BerylCore", "BerylHCI"]),
        .testTarget(name: "BerylL2CAPTests", dependencies: ["BerylL2CAP", "BerylCore", "BerylHCI"]),
        .testTarget(name: "BerylAttWireTests", dependencies: ["BerylAttWire", "BerylGATT", "BerylLink", "BerylATT", "BerylSMP", "BerylWire", "BerylCore"]),
        .testTarget(name: "BerylManagerWireTests", dependencies: ["BerylManagerWire", "BerylManager", "BerylGAP", "BerylStore", "BerylWire", "BerylCore"]),
        .testTarget(name: "BerylHCITests", dependencies: ["BerylHCI", "BerylSim", "BerylCore"]),
        .testTarget(name: "BerylPandoraTests", dependencies: [
            "BerylPandora", "PandoraInterfaces", "BerylIPC", "BerylSupervisor", "BerylStore", "BerylDaemonKit", "BerylTestSupport",
            .product(name: "GRPCCore", package: "grpc-swift-2"),
            .product(name: "GRPCInProcessTransport", package: "grpc-swift-2"),
            .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
        ]),
        // The daemons as processes, driven over their sockets (the library's, against the running stack, are BerylTests).
        .testTarget(name: "BerylProcessTests", dependencies: ["BerylIPC", "BerylSupervisor", "BerylBench", "BerylDaemonKit", "BerylStore", "BerylTestSupport"]),
    ]
)
