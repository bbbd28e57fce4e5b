import BerylCore
import BerylHardware
import BerylHCI
import BerylTransport
import Foundation
import XCTest

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

final class AdapterProfileTests: XCTestCase {
    let adapters = repositoryRoot + "/hardware/adapters"

    func testEveryShippedProfileValidatesAndTheRequiredAdaptersAreCovered() throws {
        let (profiles, errors) = ProfileLoader.loadAll(directory: adapters)
        XCTAssertEqual(errors, [])
        let ids = Set(profiles.map(\.id))
        XCTAssertEqual(ids, ["csr8510-a10", "rtl8761bu", "intel-ax200", "intel-ax210", "bcm20702", "nrf52840-zephyr",
                             "raspberrypi-3", "raspberrypi-4", "raspberrypi-5"])
        for profile in profiles {
            XCTAssertTrue(FileManager.default.fileExists(atPath: "\(adapters)/\(profile.id).json"), "file is named after the id")
        }
        let usb = Set(profiles.flatMap(\.match.usb))
        for required in ["0a12:0001", "0bda:8771", "8087:0029", "8087:0032", "0a5c:21e8"] { XCTAssertTrue(usb.contains(required), required) }
        let pi4 = try XCTUnwrap(profiles.first { $0.id == "raspberrypi-4" })
        XCTAssertEqual(pi4.transport, .uart(device: "/dev/serial1", baud: 115_200, flowControl: true))
        XCTAssertEqual(pi4.vendorSteps.first?.opcode, 0xFC18)
        XCTAssertEqual(pi4.vendorSteps.first?.parameters, [0, 0, 0xC0, 0xC6, 0x2D, 0x00], "3,000,000 little-endian")
        XCTAssertEqual(pi4.vendorSteps.first?.thenBaud, 3_000_000)
    }

    func testBrokenProfilesAreRefusedWithTheFileTheFieldAndTheReason() throws {
        let directory = NSTemporaryDirectory() + "beryl-profiles-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let base = #""id": "x", "name": "X", "match": {"usb": ["0a12:0001"]}, "transport": {"kind": "userchannel"}"#
        let cases: [(String, String)] = [
            ("{", "$"),
            (#"{"name": "X", "match": {"usb": ["0a12:0001"]}, "transport": {"kind": "userchannel"}}"#, "$.id"),
            ("{\(base), \"colour\": 1}", "$.colour"),
            (#"{"id": "x", "name": "X", "match": {"usb": ["0A12-0001"]}, "transport": {"kind": "userchannel"}}"#, "$.match.usb[0]"),
            (#"{"id": "x", "name": "X", "match": {}, "transport": {"kind": "userchannel"}}"#, "$.match"),
            (#"{"id": "x", "name": "X", "match": {"usb": ["0a12:0001"]}, "transport": {"kind": "usb"}}"#, "$.transport.kind"),
            (#"{"id": "x", "name": "X", "match": {"usb": ["0a12:0001"]}, "transport": {"kind": "uart", "device": "/dev/ttyS0", "baud": 12345}}"#, "$.transport.baud"),
            ("{\(base), \"quirks\": {\"maxACLBuffers\": 0}}", "$.quirks.maxACLBuffers"),
            ("{\(base), \"quirks\": {\"fast\": true}}", "$.quirks.fast"),
            ("{\(base), \"quirks\": {\"no2MPHY\": \"yes\"}}", "$.quirks.no2MPHY"),
            ("{\(base), \"vendorSteps\": [{\"opcode\": \"FC18\", \"parameters\": \"\", \"description\": \"d\"}]}", "$.vendorSteps[0].opcode"),
            ("{\(base), \"vendorSteps\": [{\"opcode\": \"0xFC18\", \"parameters\": \"zz\", \"description\": \"d\"}]}", "$.vendorSteps[0].parameters"),
            ("{\(base), \"patchFile\": \"x.bin\"}", "$.patchFile"),
        ]
        for (index, (json, field)) in cases.enumerated() {
            let path = "\(directory)/case\(index).json"
            try json.write(toFile: path, atomically: true, encoding: .utf8)
            XCTAssertThrowsError(try ProfileLoader.load(path: path), json) { error in
                let error = error as? ProfileError
                XCTAssertEqual(error?.file, path)
                XCTAssertEqual(error?.field, field, json)
                XCTAssertFalse(error?.reason.isEmpty ?? true)
            }
        }
        // One broken profile does not stop the others from loading.
        try "{\(base)}".write(toFile: "\(directory)/good.json", atomically: true, encoding: .utf8)
        let (profiles, errors) = ProfileLoader.loadAll(directory: directory)
        XCTAssertEqual(profiles.map(\.id), ["x"])
        XCTAssertEqual(errors.count, cases.count)
    }

    func testAutoDetectionFromSysfsAndTheDeviceTree() throws {
        let (profiles, _) = ProfileLoader.loadAll(directory: adapters)
        let root = NSTemporaryDirectory() + "beryl-sysfs-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let usbDevice = "\(root)/sys/devices/usb1/1-1"
        try FileManager.default.createDirectory(atPath: "\(usbDevice)/1-1:1.0/bluetooth/hci0", withIntermediateDirectories: true)
        try "0bda\n".write(toFile: "\(usbDevice)/idVendor", atomically: true, encoding: .utf8)
        try "8771\n".write(toFile: "\(usbDevice)/idProduct", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: "\(root)/sys/class/bluetooth/hci0", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: "\(root)/sys/class/bluetooth/hci0/device", withDestinationPath: "\(usbDevice)/1-1:1.0")
        XCTAssertEqual(ProfileDetector.detect(profiles: profiles, transport: .userChannel(device: 0), root: root)?.id, "rtl8761bu")
        XCTAssertNil(ProfileDetector.detect(profiles: profiles, transport: .userChannel(device: 1), root: root))

        try FileManager.default.createDirectory(atPath: "\(root)/proc/device-tree", withIntermediateDirectories: true)
        let compatible = Data("raspberrypi,4-model-b\0brcm,bcm2711\0".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: "\(root)/proc/device-tree/compatible", contents: compatible))
        XCTAssertEqual(ProfileDetector.detect(profiles: profiles, transport: .uart(path: "/dev/serial1", baud: 115_200, flowControl: true),
                                              root: root)?.id, "raspberrypi-4")
    }

    func testHCDPatchFilesAreHCICommandRecords() throws {
        let steps = try HCDPatch.commands(in: [0x4C, 0xFC, 0x03, 1, 2, 3, 0x4E, 0xFC, 0x00])
        XCTAssertEqual(steps.map(\.opcode), [0xFC4C, 0xFC4E])
        XCTAssertEqual(steps[0].parameters, [1, 2, 3])
        XCTAssertThrowsError(try HCDPatch.commands(in: [0x4C, 0xFC, 0x05, 1]))
    }
}

final class UdevAndSystemdTests: XCTestCase {
    func testUdevRulesParseAndCoverEveryProfile() throws {
        let text = try String(contentsOfFile: repositoryRoot + "/hardware/udev/70-beryl.rules", encoding: .utf8)
        let keys = try NSRegularExpression(pattern: #"^(ACTION|SUBSYSTEM|KERNEL|DRIVER|ATTR\{[^}]+\}|ATTRS\{[^}]+\}|ENV\{[^}]+\}|TAG|GROUP|MODE|OWNER|SYMLINK|PROGRAM|RUN\{?[^}]*\}?|GOTO|LABEL)$"#)
        var labels: Set<String> = []
        var gotos: Set<String> = []
        var rules: [String] = []
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            guard !line.isEmpty, !line.hasPrefix("#") else { continue }
            rules.append(line)
            // KEY op "value", comma-separated (udev(7)); values never contain a quote here.
            let pair = try NSRegularExpression(pattern: #"^\s*([A-Z]+(?:\{[^}]*\})?)\s*(==|!=|\+=|-=|:=|=)\s*"([^"]*)"\s*$"#)
            for clause in line.split(separator: ",") {
                let clause = String(clause)
                guard let match = pair.firstMatch(in: clause, range: NSRange(clause.startIndex..., in: clause)) else {
                    XCTFail("line \(number + 1): cannot parse '\(clause)'")
                    continue
                }
                let key = (clause as NSString).substring(with: match.range(at: 1))
                let value = (clause as NSString).substring(with: match.range(at: 3))
                XCTAssertNotNil(keys.firstMatch(in: key, range: NSRange(key.startIndex..., in: key)), "line \(number + 1): unknown key \(key)")
                if key == "LABEL" { labels.insert(value) }
                if key == "GOTO" { gotos.insert(value) }
            }
        }
        XCTAssertTrue(gotos.isSubset(of: labels), "every GOTO has its LABEL")
        let (profiles, _) = ProfileLoader.loadAll(directory: repositoryRoot + "/hardware/adapters")
        for profile in profiles {
            for id in profile.match.usb {
                let parts = id.split(separator: ":")
                let both = rules.filter { $0.contains("ATTR{idVendor}==\"\(parts[0])\"") && $0.contains("ATTR{idProduct}==\"\(parts[1])\"") }
                let hci = rules.filter { $0.contains("ATTRS{idVendor}==\"\(parts[0])\"") && $0.contains("ATTRS{idProduct}==\"\(parts[1])\"") && $0.contains("beryl-hcid@") }
                XCTAssertEqual(both.count, 1, "\(id) tagged for group access")
                XCTAssertEqual(hci.count, 1, "\(id) starts hcid")
                XCTAssertTrue(both[0].contains("BERYL_PROFILE}=\"\(profile.id)\""), "\(id) names profile \(profile.id)")
            }
        }
        XCTAssertTrue(rules.contains { $0.contains("ttyAMA") && $0.contains("beryl-hcid-uart@") }, "the Pi UART starts hcid")
    }

    func testSystemdUnitsAreWellFormedAndRunTheDaemons() throws {
        let directory = repositoryRoot + "/hardware/systemd"
        let units = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".service") }.sorted()
        XCTAssertEqual(units, ["beryl-attd.service", "beryl-hcid-uart@.service", "beryl-hcid@.service", "beryl-managerd.service", "beryl-pandora.service"])
        for unit in units {
            let text = try String(contentsOfFile: "\(directory)/\(unit)", encoding: .utf8)
            var section = ""
            var seen: [String: [String]] = [:]
            for raw in text.split(separator: "\n") {
                let line = raw.trimmingCharacters(in: .whitespaces)
                if line.isEmpty || line.hasPrefix("#") { continue }
                if line.hasPrefix("[") {
                    section = line
                    XCTAssertTrue(["[Unit]", "[Service]", "[Install]"].contains(line), "\(unit): section \(line)")
                    continue
                }
                guard let equals = line.firstIndex(of: "=") else { XCTFail("\(unit): '\(line)' is not Key=Value"); continue }
                seen[section, default: []].append(String(line[..<equals]))
            }
            XCTAssertTrue(seen["[Service]"]?.contains("ExecStart") ?? false, unit)
            XCTAssertTrue(seen["[Service]"]?.contains("Restart") ?? false, "\(unit) restarts what dies")
            let exec = text.split(separator: "\n").first { $0.hasPrefix("ExecStart=") }.map(String.init) ?? ""
            let binary = String(exec.dropFirst("ExecStart=".count).split(separator: " ")[0])
            // Where the Debian package (ci/package) installs the daemons.
            XCTAssertTrue(["/usr/libexec/beryl/hcid", "/usr/libexec/beryl/attd", "/usr/libexec/beryl/managerd", "/usr/libexec/beryl/beryl-pandora"].contains(binary), binary)
            // The daemons' sockets are 0660 in the beryl group (the package's sysusers.d entry), which apps' users join.
            XCTAssertTrue(text.contains("Group=beryl\n") || unit == "beryl-pandora.service", "\(unit) runs in the beryl group")
            if unit == "beryl-pandora.service" {
                // Pandora has no authentication: the unit serves loopback only, and runs in the group managerd grants the lab.
                XCTAssertFalse(exec.contains("--listen"), "\(unit) must not serve a network by default")
                XCTAssertTrue(text.contains("Group=beryl-lab"), unit)
            }
            if unit.contains("@") { XCTAssertTrue(exec.contains("%i") || exec.contains("%I"), "\(unit) uses its instance") }
            if unit.hasPrefix("beryl-hcid") {
                // The transport in the unit must be one hcid accepts.
                let transport = exec.split(separator: " ").drop { $0 != "--transport" }.dropFirst().first.map(String.init) ?? ""
                XCTAssertNoThrow(try TransportSpec(parsing: transport.replacingOccurrences(of: "%i", with: "hci0").replacingOccurrences(of: "%I", with: "ttyAMA0")))
            }
        }
    }
}
