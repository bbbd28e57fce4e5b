/// Which way an app's pipelined sends (updateValue, writes without response) leave, sans-IO: on the data channel while
/// the grant is live, through managerd otherwise, and one way only while none is on its way the other, so that none
/// overtakes one sent before it.
struct InFlightWays {
    enum Way: Equatable {
        case dataChannel
        case managerd
    }

    private var onDataChannel = Set<UInt64>()
    private var throughManagerd = Set<UInt64>()

    /// The way the next batch goes, or nil while it waits for the other way to drain.
    func next(live: Bool) -> Way? {
        if live, throughManagerd.isEmpty { return .dataChannel }
        return onDataChannel.isEmpty ? .managerd : nil
    }

    mutating func sent(_ ids: [UInt64], _ way: Way) {
        switch way {
        case .dataChannel: onDataChannel.formUnion(ids)
        case .managerd: throughManagerd.formUnion(ids)
        }
    }

    mutating func answered(_ id: UInt64) {
        onDataChannel.remove(id)
        throughManagerd.remove(id)
    }

    /// What was on its way is no longer waited for (the link or the services went).
    mutating func reset() { self = InFlightWays() }
}
