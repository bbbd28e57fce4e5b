/// Which way a central app's GATT requests to one peripheral go, sans-IO: on the app's data channel while its grant is
/// live (reads and writes with response), through managerd otherwise, and never both ways at once, so that no request
/// overtakes one the app made before it (attd runs a bearer's requests one at a time, in the order it gets them). A
/// request the grant refused goes again through managerd, and what the app asked meanwhile waits behind it.
struct GattPaths<Request> {
    enum Way: Equatable {
        case dataChannel
        case managerd
    }

    private(set) var onDataChannel = 0
    private(set) var throughManagerd = 0
    /// A refused request is on its way again through managerd: what follows waits until the data channel is drained.
    private var draining = false
    private var held: [(request: Request, dataCapable: Bool)] = []

    var waiting: Int { held.count }

    /// The way a request goes now, or nil when it waits (`answered` hands it back in its turn). `dataCapable`: the data
    /// channel carries this kind of request; `live`: the app has a data channel and attd said its grant is live.
    mutating func send(_ request: Request, dataCapable: Bool, live: Bool) -> Way? {
        guard !draining, held.isEmpty, let way = way(dataCapable: dataCapable, live: live) else {
            held.append((request, dataCapable))
            return nil
        }
        count(way)
        return way
    }

    /// An answer came back the way it went. `refused`: the grant refused this data-channel request, which goes again
    /// through managerd. What goes now, in order.
    mutating func answered(on way: Way, refused: Request? = nil, live: Bool) -> [(request: Request, way: Way)] {
        switch way {
        case .dataChannel: onDataChannel -= 1
        case .managerd: throughManagerd -= 1
        }
        var going: [(request: Request, way: Way)] = []
        if let refused {
            draining = true
            count(.managerd)
            going.append((refused, .managerd))
        }
        if onDataChannel == 0 { draining = false }
        while !draining, let first = held.first, let next = self.way(dataCapable: first.dataCapable, live: live) {
            held.removeFirst()
            count(next)
            going.append((first.request, next))
        }
        return going
    }

    private func way(dataCapable: Bool, live: Bool) -> Way? {
        if throughManagerd > 0 { return .managerd }
        // What the data channel does not carry waits until nothing is on its way there.
        if onDataChannel > 0 { return dataCapable ? .dataChannel : nil }
        return dataCapable && live ? .dataChannel : .managerd
    }

    private mutating func count(_ way: Way) {
        switch way {
        case .dataChannel: onDataChannel += 1
        case .managerd: throughManagerd += 1
        }
    }
}
