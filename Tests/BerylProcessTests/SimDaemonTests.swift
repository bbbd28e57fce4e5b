import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import Foundation
import XCTest

/// berylsim as a process: raw H4 over its sockets, and every `beryl sim` fault command through the control socket.
final class SimDaemonTests: XCTestCase {
    var scratch: Scratch!
    var simDir: String { scratch.root + "/sim" }

    override func setUpWithError() throws {
        scratch = try Scratch()
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", simDir, "--controllers", "2"], socket: simDir + "/control.sock")
    }

    override func tearDown() { scratch.stopAll() }

    private func attach(_ index: Int) throws -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array("\(simDir)/controller-\(index).sock".utf8) + [0]
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        XCTAssertEqual(connected, 0)
        return fd
    }

    private func write(_ fd: Int32, _ bytes: [UInt8]) {
        XCTAssertEqual(bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }, bytes.count)
    }

    /// Reads what arrives within `timeout`.
    private func read(_ fd: Int32, for timeout: Int32 = 300, until enough: Int = .max) -> [UInt8] {
        var collected: [UInt8] = []
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while collected.count < enough, poll(&poller, 1, timeout) > 0 {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = Glibc.read(fd, &buffer, 4096)
            if count <= 0 { break }
            collected += buffer.prefix(count)
        }
        return collected
    }

    private func sim(_ arguments: [String]) throws -> ToolRun {
        try runTool("beryl", ["sim"] + arguments + ["--dir", simDir])
    }

    private func state(_ arguments: [String] = ["list"]) throws -> [String: Any] {
        let run = try sim(arguments + ["--json"])
        XCTAssertEqual(run.status, 0, run.stderr)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
    }

    private func controller(_ state: [String: Any], _ index: Int) -> [String: Any] {
        ((state["controllers"] as? [[String: Any]]) ?? [])[index]
    }

    let reset: [UInt8] = [0x01, 0x03, 0x0C, 0x00]
    let resetComplete: [UInt8] = [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]

    func testRawH4OverTheSocketAndOneHostPerController() throws {
        let host = try attach(0)
        defer { close(host) }
        write(host, reset)
        XCTAssertEqual(read(host, until: 7), resetComplete)
        XCTAssertEqual(controller(try state(), 0)["hostAttached"] as? Bool, true)
        let intruder = try attach(0)
        defer { close(intruder) }
        XCTAssertEqual(read(intruder, for: 1000), [], "a second host is refused: closed at once")
        write(host, reset)
        XCTAssertEqual(read(host, until: 7), resetComplete, "the first host is unaffected")
    }

    func testFreezeThawAndCorruptThroughTheControlSocket() throws {
        let host = try attach(1)
        defer { close(host) }
        XCTAssertEqual(controller(try state(["freeze", "1"]), 1)["frozen"] as? Bool, true)
        write(host, reset)
        XCTAssertEqual(read(host, for: 300), [], "a frozen controller does not answer")
        XCTAssertNil(controller(try state(["thaw", "1"]), 1)["frozen"], "thawed (false is omitted in JSON)")
        XCTAssertEqual(read(host, until: 7), resetComplete, "the held command is answered after thaw")

        XCTAssertEqual(controller(try state(["corrupt", "1", "1"]), 1)["corruptRate"] as? Double, 1)
        write(host, reset)
        let garbled = read(host, until: 7)
        XCTAssertEqual(garbled.count, 7)
        XCTAssertTrue(zip(garbled, resetComplete).allSatisfy { $0 != $1 }, "every byte flipped")
        _ = try state(["corrupt", "1", "0"])
        write(host, reset)
        XCTAssertEqual(read(host, until: 7), resetComplete)
    }

    func testPlacementLossDelayAndReset() throws {
        var current = try state(["move", "1", "12.5", "3"])
        XCTAssertEqual(controller(current, 1)["x"] as? Double, 12.5)
        XCTAssertEqual(controller(current, 1)["y"] as? Double, 3)
        current = try state(["range", "0", "out"])
        XCTAssertNil(controller(current, 0)["inRange"], "out of range (false is omitted)")
        XCTAssertEqual(try state(["drop", "0.25"])["dropRate"] as? Double, 0.25)
        XCTAssertEqual(try state(["delay", "40"])["delayMs"] as? Int, 40)
        current = try state(["reset"])
        XCTAssertNil(current["dropRate"])
        XCTAssertEqual(controller(current, 0)["inRange"] as? Bool, true)
        XCTAssertEqual(controller(current, 1)["x"] as? Double, 1)
        let list = try sim(["list"])
        XCTAssertTrue(list.stdout.contains("host none"), list.stdout)
    }

    func testBadControlRequestsGetTypedErrors() throws {
        let noSuchController = try sim(["freeze", "7"])
        XCTAssertEqual(noSuchController.status, 1)
        XCTAssertTrue(noSuchController.stderr.contains("no controller 7"), noSuchController.stderr)
        XCTAssertEqual(try sim(["drop", "1.5"]).status, 64)
        XCTAssertEqual(try sim(["range", "0", "sideways"]).status, 64)
        let noSim = try runTool("beryl", ["sim", "list", "--dir", scratch.root + "/nothing"])
        XCTAssertEqual(noSim.status, 1)
        XCTAssertTrue(noSim.stderr.contains("connect"), noSim.stderr)
    }

    func testRangeOutDropsALinkWithSupervisionTimeoutOnBothHosts() throws {
        let central = try attach(0)
        let peripheral = try attach(1)
        defer { close(central); close(peripheral) }
        let setEventMask: [UInt8] = [0x01, 0x01, 0x0C, 0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F]
        for fd in [central, peripheral] {
            write(fd, reset)
            _ = read(fd, until: 7)
            write(fd, setEventMask)
            _ = read(fd, until: 7)
        }
        // Peripheral: ADV_IND every 20 ms, then enable.
        write(peripheral, [0x01, 0x06, 0x20, 0x0F, 0x20, 0x00, 0x20, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07, 0])
        _ = read(peripheral, until: 7)
        write(peripheral, [0x01, 0x0A, 0x20, 0x01, 0x01])
        _ = read(peripheral, until: 7)
        let address = try XCTUnwrap(controller(try state(), 1)["address"] as? String)
        let wire = address.split(separator: ":").reversed().compactMap { UInt8($0, radix: 16) }
        // LE Create Connection: interval 30 ms, supervision timeout 500 ms.
        let create: [UInt8] = [0x10, 0x00, 0x10, 0x00, 0, 0] + wire + [0, 24, 0, 24, 0, 0, 0, 50, 0, 0, 0, 0, 0]
        write(central, [0x01, 0x0D, 0x20, UInt8(create.count)] + create)
        let connected = read(central, for: 2000, until: 7 + 22)
        XCTAssertEqual(Array(connected.prefix(4)), [0x04, 0x0F, 0x04, 0x00], "Command Status, success")
        XCTAssertEqual(Array(connected.suffix(22).prefix(5)), [0x04, 0x3E, 0x13, 0x01, 0x00], "LE Connection Complete, success")
        _ = read(peripheral, for: 500)
        XCTAssertEqual((try state()["links"] as? [[String: Any]])?.count, 1)

        _ = try state(["range", "1", "out"])
        let centralLoss = read(central, for: 1500, until: 7)
        let peripheralLoss = read(peripheral, for: 1500, until: 7)
        XCTAssertEqual(Array(centralLoss.prefix(3)), [0x04, 0x05, 0x04])
        XCTAssertEqual(centralLoss.last, 0x08, "Disconnection Complete, reason Connection Timeout")
        XCTAssertEqual(peripheralLoss.last, 0x08)
    }
}
