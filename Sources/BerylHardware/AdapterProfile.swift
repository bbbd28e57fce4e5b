import BerylCore
import BerylHCI
import BerylTransport
import FoundationEssentials
import Glibc

/// One adapter's profile, from `hardware/adapters/*.json`: how to recognise it, how to reach it, and what to work around.
public struct AdapterProfile: Sendable, Equatable {
    public struct Match: Sendable, Equatable {
        /// "vvvv:pppp", lower-case hex.
        public var usb: [String] = []
        /// Device-tree `compatible` strings of the board, for on-board UART controllers.
        public var deviceTree: [String] = []
    }

    public enum Transport: Sendable, Equatable {
        case userChannel
        case uart(device: String, baud: Int, flowControl: Bool)
    }

    public var id: String
    public var name: String
    public var match: Match
    public var transport: Transport
    public var firmware: [String]
    /// A Broadcom/Cypress .hcd RAM patch, sent as HCI commands during bring-up (its path under a firmware directory).
    public var patchFile: String?
    public var quirks: ControllerQuirks
    public var vendorSteps: [VendorStep]
    public var maxConnections: Int?
    public var notes: String
}

public struct ProfileError: Error, Equatable, Sendable, CustomStringConvertible {
    public var file: String
    public var field: String
    public var reason: String

    public var description: String { "\(file): \(field): \(reason)" }
}

public enum ProfileLoader {
    /// Parses and checks one profile; every rule broken is reported with the file and the field's path.
    public static func load(path: String) throws(ProfileError) -> AdapterProfile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ProfileError(file: path, field: "$", reason: "cannot read the file")
        }
        let object: JSONValue
        do {
            object = try JSONValue.parse(data)
        } catch {
            throw ProfileError(file: path, field: "$", reason: "not JSON: \(error)")
        }
        return try parse(object, file: path)
    }

    public static func loadAll(directory: String) -> (profiles: [AdapterProfile], errors: [ProfileError]) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(".json") && $0 != "schema.json" }.sorted()
        var profiles: [AdapterProfile] = []
        var errors: [ProfileError] = []
        for name in names {
            do { profiles.append(try load(path: "\(directory)/\(name)")) } catch { errors.append(error) }
        }
        return (profiles, errors)
    }

    static let knownKeys: Set<String> = ["$schema", "id", "name", "match", "transport", "firmware", "patchFile", "quirks",
                                         "vendorSteps", "limits", "notes"]

    static func parse(_ object: JSONValue, file: String) throws(ProfileError) -> AdapterProfile {
        func fail(_ field: String, _ reason: String) -> ProfileError { ProfileError(file: file, field: field, reason: reason) }
        guard let root = object.object else { throw fail("$", "a profile is a JSON object") }
        if let unknown = root.keys.first(where: { !knownKeys.contains($0) }) { throw fail("$.\(unknown)", "unknown field") }
        guard let id = root["id"]?.string, id.wholeMatch(of: /[a-z0-9][a-z0-9-]*/) != nil else {
            throw fail("$.id", "required: lower-case letters, digits and dashes")
        }
        guard let name = root["name"]?.string, !name.isEmpty else { throw fail("$.name", "required: a non-empty string") }

        guard let matchObject = root["match"]?.object else { throw fail("$.match", "required: an object with usb or deviceTree") }
        var match = AdapterProfile.Match()
        if let usb = matchObject["usb"] {
            guard let ids = usb.strings, !ids.isEmpty else { throw fail("$.match.usb", "a non-empty list of \"vvvv:pppp\"") }
            for (index, value) in ids.enumerated() where value.wholeMatch(of: /[0-9a-f]{4}:[0-9a-f]{4}/) == nil {
                throw fail("$.match.usb[\(index)]", "\"\(value)\" is not a lower-case hex VID:PID")
            }
            match.usb = ids
        }
        if let tree = matchObject["deviceTree"] {
            guard let compatibles = tree.strings, !compatibles.isEmpty, compatibles.allSatisfy({ $0.contains(",") }) else {
                throw fail("$.match.deviceTree", "a non-empty list of \"vendor,board\" compatible strings")
            }
            match.deviceTree = compatibles
        }
        guard !match.usb.isEmpty || !match.deviceTree.isEmpty else { throw fail("$.match", "needs usb or deviceTree") }

        guard let transportObject = root["transport"]?.object, let kind = transportObject["kind"]?.string else {
            throw fail("$.transport.kind", "required: \"userchannel\" or \"uart\"")
        }
        let transport: AdapterProfile.Transport
        switch kind {
        case "userchannel":
            transport = .userChannel
        case "uart":
            guard let device = transportObject["device"]?.string, device.hasPrefix("/dev/") else {
                throw fail("$.transport.device", "required for uart: a /dev path")
            }
            let baud = transportObject["baud"]?.int ?? 115_200
            guard TransportSpec.supportedBaudRates.contains(baud) else { throw fail("$.transport.baud", "unsupported baud rate \(baud)") }
            transport = .uart(device: device, baud: baud, flowControl: transportObject["flowControl"]?.bool ?? true)
        default:
            throw fail("$.transport.kind", "\"\(kind)\" is not \"userchannel\" or \"uart\"")
        }

        var quirks = ControllerQuirks()
        if let quirkObject = root["quirks"] {
            guard let q = quirkObject.object else { throw fail("$.quirks", "an object") }
            for key in q.keys where !["noReadBufferSizeV2", "maxACLBuffers", "noDataLengthExtension", "no2MPHY"].contains(key) {
                throw fail("$.quirks.\(key)", "unknown quirk")
            }
            if let value = q["noReadBufferSizeV2"] {
                guard let flag = value.bool else { throw fail("$.quirks.noReadBufferSizeV2", "true or false") }
                quirks.noReadBufferSizeV2 = flag
            }
            if let value = q["noDataLengthExtension"] {
                guard let flag = value.bool else { throw fail("$.quirks.noDataLengthExtension", "true or false") }
                quirks.noDataLengthExtension = flag
            }
            if let value = q["no2MPHY"] {
                guard let flag = value.bool else { throw fail("$.quirks.no2MPHY", "true or false") }
                quirks.no2MPHY = flag
            }
            if let value = q["maxACLBuffers"] {
                guard let count = value.int, (1...255).contains(count) else { throw fail("$.quirks.maxACLBuffers", "a number from 1 to 255") }
                quirks.maxACLBuffers = count
            }
        }

        var steps: [VendorStep] = []
        if let stepList = root["vendorSteps"] {
            guard let list = stepList.array?.compactMap(\.object), list.count == stepList.array?.count else { throw fail("$.vendorSteps", "a list of {opcode, parameters, description}") }
            for (index, step) in list.enumerated() {
                guard let opcodeText = step["opcode"]?.string, opcodeText.hasPrefix("0x"), let opcode = UInt16(opcodeText.dropFirst(2), radix: 16) else {
                    throw fail("$.vendorSteps[\(index)].opcode", "a hex opcode like \"0xFC18\"")
                }
                guard let parameters = Hex.decode(step["parameters"]?.string ?? ""), parameters.count <= 255 else {
                    throw fail("$.vendorSteps[\(index)].parameters", "hex bytes, at most 255")
                }
                guard let description = step["description"]?.string, !description.isEmpty else {
                    throw fail("$.vendorSteps[\(index)].description", "required: what the step does")
                }
                var thenBaud: Int?
                if let value = step["thenBaud"] {
                    guard let baud = value.int, TransportSpec.supportedBaudRates.contains(baud) else {
                        throw fail("$.vendorSteps[\(index)].thenBaud", "a supported baud rate")
                    }
                    thenBaud = baud
                }
                steps.append(VendorStep(opcode: opcode, parameters: parameters, description: description, thenBaud: thenBaud))
            }
        }

        let firmware = root["firmware"]?.strings ?? []
        if root["firmware"] != nil, root["firmware"]?.strings == nil { throw fail("$.firmware", "a list of file names") }
        var maxConnections: Int?
        if let limits = root["limits"]?.object {
            if let value = limits["maxConnections"] {
                guard let count = value.int, count > 0 else { throw fail("$.limits.maxConnections", "a positive number") }
                maxConnections = count
            }
        }
        let patchFile = root["patchFile"]?.string
        if let patchFile, !patchFile.hasSuffix(".hcd") { throw fail("$.patchFile", "a Broadcom .hcd patch file") }
        return AdapterProfile(id: id, name: name, match: match, transport: transport, firmware: firmware, patchFile: patchFile,
                              quirks: quirks, vendorSteps: steps, maxConnections: maxConnections,
                              notes: root["notes"]?.string ?? "")
    }
}

/// Broadcom/Cypress .hcd patch files are a sequence of HCI commands: opcode (2, little-endian), length (1), parameters.
public enum HCDPatch {
    public static func commands(in bytes: [UInt8]) throws(DecodeError) -> [VendorStep] {
        var reader = ByteReader(bytes)
        var steps: [VendorStep] = []
        while !reader.isAtEnd {
            let opcode = try reader.u16()
            let length = Int(try reader.u8())
            steps.append(VendorStep(opcode: opcode, parameters: try reader.take(length), description: "patch record \(steps.count)"))
        }
        return steps
    }
}

/// Picks the profile for the adapter in front of us from sysfs (USB VID:PID) or the device tree.
public enum ProfileDetector {
    public static func detect(profiles: [AdapterProfile], transport: TransportSpec, root: String = "") -> AdapterProfile? {
        switch transport {
        case .userChannel(let device):
            // /sys/class/bluetooth/hciN/device is the USB interface; its parent directory holds idVendor and idProduct.
            let interface = "\(root)/sys/class/bluetooth/hci\(device)/device"
            for candidate in [interface + "/..", interface] {
                if let vendor = read(candidate + "/idVendor"), let product = read(candidate + "/idProduct") {
                    let id = "\(vendor):\(product)".lowercased()
                    return profiles.first { $0.match.usb.contains(id) }
                }
            }
            return nil
        case .uart, .tcp, .unix:
            guard let raw = FileManager.default.contents(atPath: "\(root)/proc/device-tree/compatible") else { return nil }
            let compatibles = raw.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            return profiles.first { profile in profile.match.deviceTree.contains { compatibles.contains($0) } }
        }
    }

    private static func read(_ path: String) -> String? {
        (try? String(contentsOfFile: path, encoding: .utf8)).map { String($0.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed()) }
    }
}
