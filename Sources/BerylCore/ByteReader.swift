/// Why a byte sequence could not be decoded. Remote devices and IPC peers send these; they are never fatal.
public enum DecodeError: Error, Equatable, Sendable {
    case truncated(needed: Int, available: Int)
    case invalidValue(field: String, value: UInt64)
    case invalidLength(field: String, length: Int)
}

/// Little-endian reader over a byte buffer, as every Bluetooth wire format is (Core Vol 1 Part E §2.2).
public struct ByteReader {
    public let bytes: [UInt8]
    public private(set) var offset: Int

    public init(_ bytes: [UInt8], offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    public var remaining: Int { bytes.count - offset }
    public var isAtEnd: Bool { offset >= bytes.count }

    private func require(_ count: Int) throws(DecodeError) {
        guard count >= 0, remaining >= count else { throw .truncated(needed: count, available: remaining) }
    }

    public mutating func u8() throws(DecodeError) -> UInt8 {
        try require(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func u16() throws(DecodeError) -> UInt16 {
        UInt16(try uint(byteCount: 2))
    }

    public mutating func u24() throws(DecodeError) -> UInt32 {
        UInt32(try uint(byteCount: 3))
    }

    public mutating func u32() throws(DecodeError) -> UInt32 {
        UInt32(try uint(byteCount: 4))
    }

    public mutating func u64() throws(DecodeError) -> UInt64 {
        try uint(byteCount: 8)
    }

    public mutating func i8() throws(DecodeError) -> Int8 {
        Int8(bitPattern: try u8())
    }

    public mutating func uint(byteCount: Int) throws(DecodeError) -> UInt64 {
        precondition(byteCount <= 8)
        try require(byteCount)
        var value: UInt64 = 0
        for index in 0..<byteCount {
            value |= UInt64(bytes[offset + index]) << (8 * index)
        }
        offset += byteCount
        return value
    }

    public mutating func take(_ count: Int) throws(DecodeError) -> [UInt8] {
        try require(count)
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    public mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }
}

/// Little-endian writer, the counterpart of `ByteReader`.
public struct ByteWriter {
    public private(set) var bytes: [UInt8]

    public init(capacity: Int = 32) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public mutating func u8(_ value: UInt8) { bytes.append(value) }
    public mutating func u16(_ value: UInt16) { uint(UInt64(value), byteCount: 2) }
    public mutating func u24(_ value: UInt32) { uint(UInt64(value), byteCount: 3) }
    public mutating func u32(_ value: UInt32) { uint(UInt64(value), byteCount: 4) }
    public mutating func u64(_ value: UInt64) { uint(value, byteCount: 8) }
    public mutating func i8(_ value: Int8) { bytes.append(UInt8(bitPattern: value)) }

    public mutating func uint(_ value: UInt64, byteCount: Int) {
        for index in 0..<byteCount {
            bytes.append(UInt8(truncatingIfNeeded: value >> (8 * index)))
        }
    }

    public mutating func append<S: Sequence>(_ more: S) where S.Element == UInt8 {
        bytes.append(contentsOf: more)
    }
}
