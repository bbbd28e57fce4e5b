public enum Hex {
    public static func encode<S: Sequence>(_ bytes: S, separator: String = "") -> String where S.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for (index, byte) in bytes.enumerated() {
            if index > 0, !separator.isEmpty { out.append(contentsOf: separator.utf8) }
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Accepts upper or lower case, optionally separated by spaces, colons or dashes; nil on any other character or an odd digit count.
    public static func decode(_ text: String) -> [UInt8]? {
        var nibbles: [UInt8] = []
        for scalar in text.unicodeScalars {
            switch scalar {
            case "0"..."9": nibbles.append(UInt8(scalar.value - 48))
            case "a"..."f": nibbles.append(UInt8(scalar.value - 87))
            case "A"..."F": nibbles.append(UInt8(scalar.value - 55))
            case " ", ":", "-": continue
            default: return nil
            }
        }
        guard nibbles.count % 2 == 0 else { return nil }
        return stride(from: 0, to: nibbles.count, by: 2).map { nibbles[$0] << 4 | nibbles[$0 + 1] }
    }
}
