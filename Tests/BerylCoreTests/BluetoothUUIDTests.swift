import BerylCore
import XCTest

final class BluetoothUUIDTests: XCTestCase {
    func testSixteenBitAliasExpandsOntoTheBaseUUID() throws {
        let heartRate = try XCTUnwrap(BluetoothUUID("180D"))
        XCTAssertEqual(heartRate.fullString, "0000180D-0000-1000-8000-00805F9B34FB")
        XCTAssertEqual(heartRate.uuid16, 0x180D)
        XCTAssertEqual(heartRate.description, "180D")
        XCTAssertEqual(heartRate, BluetoothUUID("0000180d-0000-1000-8000-00805f9b34fb"))
        XCTAssertEqual(heartRate, BluetoothUUID(0x180D))
    }

    func testATTEncodingIsLittleEndianAndShortestForm() throws {
        XCTAssertEqual(BluetoothUUID(0x2A37).attWire, [0x37, 0x2A])
        let nus = try XCTUnwrap(BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E"))
        XCTAssertNil(nus.uuid16)
        XCTAssertEqual(nus.attWire.count, 16)
        XCTAssertEqual(nus.attWire.first, 0x9E)
        XCTAssertEqual(nus.attWire.last, 0x6E)
        XCTAssertEqual(BluetoothUUID(wire: nus.attWire), nus)
        XCTAssertEqual(nus.description, "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
    }

    func testThirtyTwoBitFormDecodesFromWire() {
        let uuid = BluetoothUUID(uint32: 0x1234_5678)
        XCTAssertEqual(BluetoothUUID(wire: [0x78, 0x56, 0x34, 0x12]), uuid)
        XCTAssertEqual(uuid.description, "12345678")
        XCTAssertEqual(BluetoothUUID("12345678"), uuid)
        // A 32-bit alias has no 2-byte ATT form, so ATT carries all 128 bits.
        XCTAssertEqual(uuid.attWire.count, 16)
    }

    func testMalformedTextIsRejected() {
        for text in ["", "18D", "180G", "0000180D-0000-1000-8000-00805F9B34F", "0000180D00001000800000805F9B34FB",
                     "0000180D-00001-000-8000-00805F9B34FB", "0000180Z-0000-1000-8000-00805F9B34FB", "180D "] {
            XCTAssertNil(BluetoothUUID(text), text)
        }
        XCTAssertNil(BluetoothUUID(wire: [1, 2, 3]))
    }
}

final class AddressTests: XCTestCase {
    func testTextIsMostSignificantFirstAndWireIsLittleEndian() throws {
        let address = try XCTUnwrap(BDAddress("C0:11:22:33:44:55"))
        XCTAssertEqual(address.bytes, [0x55, 0x44, 0x33, 0x22, 0x11, 0xC0])
        XCTAssertEqual(address.description, "C0:11:22:33:44:55")
        XCTAssertEqual(BDAddress(wire: address.bytes), address)
    }

    func testRandomAddressKindComesFromTheTopTwoBits() throws {
        XCTAssertEqual(try XCTUnwrap(BDAddress("C0:00:00:00:00:01")).randomKind, .static)
        XCTAssertEqual(try XCTUnwrap(BDAddress("40:00:00:00:00:01")).randomKind, .resolvablePrivate)
        XCTAssertEqual(try XCTUnwrap(BDAddress("00:00:00:00:00:01")).randomKind, .nonResolvablePrivate)
        XCTAssertEqual(try XCTUnwrap(BDAddress("80:00:00:00:00:01")).randomKind, .reserved)
    }

    func testDeviceAddressCarriesItsType() throws {
        let random = try XCTUnwrap(DeviceAddress("C0:11:22:33:44:55/random"))
        XCTAssertEqual(random.type, .random)
        XCTAssertEqual(random.description, "C0:11:22:33:44:55/random")
        XCTAssertEqual(try XCTUnwrap(DeviceAddress("00:11:22:33:44:55")).type, .public)
        XCTAssertNil(DeviceAddress("00:11:22:33:44:55/other"))
    }

    func testMalformedAddressesAreRejected() {
        for text in ["", "00:11:22:33:44", "00:11:22:33:44:55:66", "0:11:22:33:44:55", "GG:11:22:33:44:55", "001122334455"] {
            XCTAssertNil(BDAddress(text), text)
        }
    }
}

final class ByteReaderTests: XCTestCase {
    func testReadsLittleEndianIntegers() throws {
        var reader = ByteReader([0x01, 0x34, 0x12, 0x56, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 0xFF])
        XCTAssertEqual(try reader.u8(), 0x01)
        XCTAssertEqual(try reader.u16(), 0x1234)
        XCTAssertEqual(try reader.u24(), 0x123456)
        XCTAssertEqual(try reader.u32(), 0x1234_5678)
        XCTAssertEqual(try reader.i8(), -1)
        XCTAssertTrue(reader.isAtEnd)
    }

    func testTruncatedInputThrowsWithWhatWasMissing() {
        var reader = ByteReader([0x01, 0x02, 0x03])
        XCTAssertThrowsError(try reader.u32()) { error in
            XCTAssertEqual(error as? DecodeError, .truncated(needed: 4, available: 3))
        }
        // A failed read consumes nothing.
        XCTAssertEqual(reader.remaining, 3)
        XCTAssertThrowsError(try reader.take(-1))
    }

    func testWriterRoundTripsThroughReader() throws {
        var writer = ByteWriter()
        writer.u16(0xBEEF)
        writer.u24(0xABCDEF)
        writer.u64(0x0102_0304_0506_0708)
        writer.append([9, 9])
        var reader = ByteReader(writer.bytes)
        XCTAssertEqual(try reader.u16(), 0xBEEF)
        XCTAssertEqual(try reader.u24(), 0xABCDEF)
        XCTAssertEqual(try reader.u64(), 0x0102_0304_0506_0708)
        XCTAssertEqual(reader.rest(), [9, 9])
    }

    func testHexRoundTripAndRejectsBadDigits() {
        XCTAssertEqual(Hex.encode([0x00, 0xAB, 0x0F]), "00ab0f")
        XCTAssertEqual(Hex.encode([0x00, 0xAB], separator: " "), "00 ab")
        XCTAssertEqual(Hex.decode("00 AB:0f"), [0x00, 0xAB, 0x0F])
        XCTAssertNil(Hex.decode("abc"))
        XCTAssertNil(Hex.decode("zz"))
    }

    func testAListIsTakenWholeOrRefused() {
        XCTAssertEqual(BluetoothUUID.list(["180D", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"]),
                       [BluetoothUUID(0x180D), BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!])
        XCTAssertEqual(BluetoothUUID.list([]), [])
        XCTAssertNil(BluetoothUUID.list(["180D", "heart"]), "one bad string refuses the list")
    }
}
