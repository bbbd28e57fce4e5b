import BerylHCI

extension ManagerCore {
    /// What the controller's one advertiser does now: the apps' advertising as their lifecycle allows, each in turn,
    /// then a lab session's (`lab`, its commands); a turn's end is one of `nextDeadline`'s.
    public mutating func planAdvertising(lab: [HCICommandPacket]?, poweredOn: Bool, ownAddressRandom: Bool, at now: Duration) -> AdvertisingRotation.Plan {
        let candidates = advertisers.map { AdvertisingRotation.Candidate(key: $0.key, advertiser: $0.value, policy: policy(for: $0.key.holder)) }
        return advertising.plan(candidates, lab: lab, poweredOn: poweredOn, ownAddressRandom: ownAddressRandom, at: now)
    }

    /// The controller was reset: it advertises nothing until planned again.
    public mutating func controllerForgotAdvertising() { advertising.controllerForgot() }
}
