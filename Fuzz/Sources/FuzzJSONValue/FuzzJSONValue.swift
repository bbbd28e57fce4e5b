import BerylCore
import FoundationEssentials

/// Input: any bytes, as an adapter profile or an app manifest file holds them (JSONValue replaced JSONSerialization
/// there). Beyond not crashing: what parses reads back consistently through every accessor.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSONValue(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard let value = try? JSONValue.parse(Data(UnsafeBufferPointer(start: data, count: size))) else { return 0 }
    check(value, depth: 0)
    return 0
}

private func check(_ value: JSONValue, depth: Int) {
    let kinds = [value.string != nil, value.bool != nil, value.double != nil, value.array != nil, value.object != nil, value == .null]
    precondition(kinds.filter { $0 }.count == 1, "a value is exactly one kind")
    if let int = value.int { precondition(Double(int) == value.double, "an int is a number without a fraction") }
    if let strings = value.strings { precondition(strings.count == value.array?.count, "strings only for an all-string array") }
    guard depth < 64 else { return }
    for element in value.array ?? [] { check(element, depth: depth + 1) }
    for element in (value.object ?? [:]).values { check(element, depth: depth + 1) }
}

@_silgen_name("LLVMFuzzerRunDriver")
private func runFuzzerDriver(_ argc: UnsafeMutablePointer<Int32>,
                             _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                             _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

/// SwiftPM links an executable's entry point as <Module>_main; libFuzzer's driver takes it from there.
@_cdecl("FuzzJSONValue_main")
public func fuzzerEntry(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments) { data, size in fuzzJSONValue(data, size) }
}
