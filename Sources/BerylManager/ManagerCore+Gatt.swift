import BerylCore

/// An app's GATT request on a peripheral it holds, as far as managerd's bookkeeping looks into it.
public enum GattAsk: Equatable, Sendable {
    /// setNotifyValue(_:for:): the value's and its Client Characteristic Configuration descriptor's handles (nil: not
    /// one an ATT request can name; attd refuses it, and the refusal leaves the asker out).
    case setNotify(enable: Bool, valueHandle: UInt16, cccdHandle: UInt16?)
    /// Discovery, reads and writes: attd answers them (a discovery's answer goes to `discovered`).
    case other
}

extension ManagerCore {
    /// What becomes of an app's GATT request.
    public enum GattStep: Sendable {
        /// Ask attd now; its answer goes to `gattAnswered`.
        case forward
        /// attd has not reported the link's bearer yet: the request waits, and `.gattResumed(token)` says when to
        /// ask again (the bearer opened, or the link or attd went and the request fails as it would have at once).
        case waitForBearer(token: UInt64)
        /// Another manager's subscription stands for this one: the app is answered at once, with these changes.
        case answered([Output])
    }

    /// An app (`holder`) asks a GATT operation on `link`. attd hears of a new link from hcid as managerd does, and may
    /// not have yet: an app that asks at once (in didConnect, as the guide does) waits for the link's bearer rather
    /// than being told there is no link.
    public mutating func gattAsked(_ ask: GattAsk, on link: UInt16, identifier: String, by holder: ManagerHolder) -> GattStep {
        guard attMTUs[link] != nil else {
            let token = nextGattToken
            nextGattToken += 1
            gattAwaitingBearer[link, default: []].append(token)
            return .waitForBearer(token: token)
        }
        if case .setNotify(let enable, let valueHandle, let cccdHandle?) = ask,
           let answered = notifyRequested(enable, valueHandle: valueHandle, cccdHandle: cccdHandle, on: link, identifier: identifier, by: holder) {
            return .answered(answered)
        }
        return .forward
    }

    /// attd answered a forwarded request (`succeeded`: with no error): a descriptor write settles the subscription.
    public mutating func gattAnswered(_ ask: GattAsk, succeeded: Bool, on link: UInt16, identifier: String, by holder: ManagerHolder) -> [Output] {
        guard case .setNotify(let enable, let valueHandle, _) = ask else { return [] }
        return notifyWritten(enable, succeeded: succeeded, valueHandle: valueHandle, on: link, identifier: identifier, by: holder)
    }

    /// The requests waiting for `link`'s bearer, to be asked again (in the order they were asked).
    mutating func resumeGatt(on link: UInt16) -> [Output] {
        (gattAwaitingBearer.removeValue(forKey: link) ?? []).map { .gattResumed(token: $0) }
    }

    mutating func resumeEveryGatt() -> [Output] {
        gattAwaitingBearer.keys.sorted().flatMap { resumeGatt(on: $0) }
    }
}
