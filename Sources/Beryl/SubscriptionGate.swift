/// Values a peripheral notified while the app's subscription to them is being written, held until that write is
/// answered, sans-IO. attd sends a notification straight to the app's data channel but the descriptor write's answer
/// through managerd, so the first values can overtake the answer; Core Bluetooth's app hears
/// didUpdateNotificationStateFor (isNotifying true) before the values it enabled, and so does Beryl's.
struct SubscriptionGate<Value> {
    private var writing: [UInt16: Int] = [:]
    private var held: [UInt16: [Value]] = [:]

    /// A subscription's descriptor write for the value handle is on its way.
    mutating func subscribing(_ valueHandle: UInt16) {
        writing[valueHandle, default: 0] += 1
    }

    /// A value arrived: handed back to deliver now, or nil while a subscription to it is being written.
    mutating func arrived(_ value: Value, of valueHandle: UInt16) -> Value? {
        guard writing[valueHandle] != nil else { return value }
        held[valueHandle, default: []].append(value)
        return nil
    }

    /// The descriptor write was answered (either way): the values held for it, in the order they came, once no other
    /// write for the same value is on its way.
    mutating func answered(_ valueHandle: UInt16) -> [Value] {
        guard let count = writing[valueHandle] else { return [] }
        guard count == 1 else {
            writing[valueHandle] = count - 1
            return []
        }
        writing[valueHandle] = nil
        return held.removeValue(forKey: valueHandle) ?? []
    }

    /// The link went down: nothing is being written any more, and nothing held is delivered.
    mutating func reset() {
        writing.removeAll()
        held.removeAll()
    }
}
