import BerylCore
import BerylCrypto

extension SMPSession {
    // MARK: Secure Connections (Core Vol 3 Part H §2.3.5.6)

    func sendPublicKey() throws -> SMPOutput {
        let pair = try makeKeyPair()
        keyPair = pair
        return send(.pairingPublicKey(x: pair.publicX.reversed(), y: pair.publicY.reversed()))
    }

    func takePublicKey(x: [UInt8], y: [UInt8]) throws -> [SMPOutput] {
        var outputs: [SMPOutput] = []
        if !isInitiator { outputs.append(try sendPublicKey()) }
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        peerX = x.reversed()
        // A peer echoing our own key is a reflection attack (erratum 10734).
        guard peerX != keyPair.publicX else { throw PairingFailure.invalidParameters }
        dhKey = try keyPair.sharedSecret(peerX: peerX, peerY: y.reversed())
        switch method {
        case .justWorks, .numericComparison:
            localNonce = random(16)
            if isInitiator {
                phase = .waitingConfirm
            } else {
                // The responder commits first: Cb = f4(PKb, PKa, Nb, 0).
                outputs.append(send(.pairingConfirm(try SMPToolbox.f4(u: keyPair.publicX, v: peerX, x: localNonce, z: 0).reversed())))
                phase = .waitingRandom
            }
        case .passkeyEntry(let localInputs, let remoteInputs):
            phase = .waitingConfirm
            outputs += passkeyPrompt(localInputs: localInputs, remoteInputs: remoteInputs)
            if isInitiator, passkey != nil { outputs += try passkeyRoundCommit() }
        }
        return outputs
    }

    /// Shows a fresh passkey when we display it, or asks our user for the one the peer shows.
    func passkeyPrompt(localInputs: Bool, remoteInputs: Bool) -> [SMPOutput] {
        if localInputs { return [.prompt(.enterPasskey)] }
        let bytes = random(4)
        let value = (UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])) % 1_000_000
        passkey = value
        return [.prompt(.displayPasskey(value))]
    }

    /// The user typed the passkey (nil: the user cancelled).
    public func passkeyEntered(_ value: UInt32?, at now: Duration) -> [SMPOutput] {
        guard isPairing, case .passkeyEntry(true, _) = method, passkey == nil else { return [.log("no passkey was asked for")] }
        guard let value, value <= 999_999 else { return fail(.passkeyEntryFailed, "passkey entry cancelled or out of range") }
        passkey = value
        deadline = now + Self.timeout
        do {
            if !secureConnections {
                tk = [UInt8](repeating: 0, count: 12) + bigEndian(value)
                return isInitiator ? try legacySendConfirm() : (peerConfirm != nil ? try afterConfirm() : [])
            }
            if isInitiator, phase == .waitingConfirm { return try passkeyRoundCommit() }
            if !isInitiator, phase == .waitingConfirm, peerConfirm != nil { return try afterConfirm() }
            return []
        } catch {
            return fail(.unspecifiedReason, "pairing failed: \(error)")
        }
    }

    /// The user compared the numbers (numeric comparison).
    public func numberConfirmed(_ matches: Bool, at now: Duration) -> [SMPOutput] {
        guard isPairing, method == .numericComparison || method == .justWorks, phase == .waitingUser else { return [.log("no number was waiting for confirmation")] }
        guard matches else {
            return fail(.numericComparisonFailed, method == .justWorks ? "the user refused the pairing" : "the user said the numbers differ")
        }
        userConfirmed = true
        deadline = now + Self.timeout
        do {
            if isInitiator { return try initiatorSendCheck() }
            phase = .waitingDHKeyCheck
            return peerCheck != nil ? try responderCheck() : []
        } catch {
            return fail(.unspecifiedReason, "pairing failed: \(error)")
        }
    }

    /// This round's passkey bit (Core Vol 3 Part H §2.3.5.6.3); none before the passkey is known, which a peer
    /// sending its confirm and random out of turn would otherwise reach.
    func passkeyBit() throws -> UInt8 {
        guard let passkey else { throw PairingFailure.unspecifiedReason }
        return 0x80 | UInt8((passkey >> UInt32(round)) & 1)
    }

    /// Initiator: commit to this round's bit, Cai = f4(PKa, PKb, Nai, rai) (§2.3.5.6.3).
    func passkeyRoundCommit() throws -> [SMPOutput] {
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        localNonce = random(16)
        return [send(.pairingConfirm(try SMPToolbox.f4(u: keyPair.publicX, v: peerX, x: localNonce, z: try passkeyBit()).reversed()))]
    }

    func afterConfirm() throws -> [SMPOutput] {
        if !secureConnections { return try legacyAfterConfirm() }
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        if isInitiator {
            // In passkey entry the initiator commits first (§2.3.5.6.3): a confirm before ours is out of turn.
            if case .passkeyEntry = method, passkey == nil { throw PairingFailure.unspecifiedReason }
            phase = .waitingRandom
            return [send(.pairingRandom(localNonce.reversed()))]
        }
        // Responder in passkey entry: commit to the same bit once our passkey is known.
        guard passkey != nil else { return [] }
        localNonce = random(16)
        phase = .waitingRandom
        return [send(.pairingConfirm(try SMPToolbox.f4(u: keyPair.publicX, v: peerX, x: localNonce, z: try passkeyBit()).reversed()))]
    }

    func afterRandom() throws -> [SMPOutput] {
        if !secureConnections { return try legacyAfterRandom() }
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        switch method {
        case .justWorks, .numericComparison:
            var outputs: [SMPOutput] = []
            if isInitiator {
                guard let peerConfirm, peerConfirm == (try SMPToolbox.f4(u: peerX, v: keyPair.publicX, x: peerNonce, z: 0)) else {
                    throw PairingFailure.confirmValueFailed
                }
            } else {
                outputs.append(send(.pairingRandom(localNonce.reversed())))
            }
            if method == .justWorks, asksJustWorksConsent {
                phase = .waitingUser
                return outputs + [.prompt(.confirmPairing)]
            }
            guard method == .numericComparison else {
                if isInitiator { return outputs + (try initiatorSendCheck()) }
                phase = .waitingDHKeyCheck
                return outputs
            }
            let (pka, pkb, na, nb) = isInitiator ? (keyPair.publicX, peerX, localNonce, peerNonce) : (peerX, keyPair.publicX, peerNonce, localNonce)
            phase = .waitingUser
            return outputs + [.prompt(.confirmNumber(try SMPToolbox.g2(u: pka, v: pkb, x: na, y: nb) % 1_000_000))]
        case .passkeyEntry:
            guard let peerConfirm else { throw PairingFailure.unspecifiedReason }
            guard peerConfirm == (try SMPToolbox.f4(u: peerX, v: keyPair.publicX, x: peerNonce, z: try passkeyBit())) else {
                throw PairingFailure.confirmValueFailed
            }
            var outputs: [SMPOutput] = []
            if !isInitiator { outputs.append(send(.pairingRandom(localNonce.reversed()))) }
            round += 1
            self.peerConfirm = nil
            guard round == 20 else {
                phase = .waitingConfirm
                return outputs + (isInitiator ? try passkeyRoundCommit() : [])
            }
            if isInitiator { return outputs + (try initiatorSendCheck()) }
            phase = .waitingDHKeyCheck
            return outputs
        }
    }

    /// The address fields of f5/f6: type then address, most significant first.
    func addressField(_ address: DeviceAddress) -> [UInt8] { [address.type.isRandom ? 1 : 0] + address.address.bytes.reversed() }

    var initiatorAddress: DeviceAddress { isInitiator ? localAddress : peerAddress }
    var responderAddress: DeviceAddress { isInitiator ? peerAddress : localAddress }

    func deriveKeys() throws {
        let (na, nb) = isInitiator ? (localNonce, peerNonce) : (peerNonce, localNonce)
        let keys = try SMPToolbox.f5(w: dhKey, n1: na, n2: nb, a1: addressField(initiatorAddress), a2: addressField(responderAddress))
        macKey = keys.macKey
        ltk = masked(keys.ltk)
    }

    /// The r of f6: the passkey in passkey entry, zero otherwise (§2.3.5.6.5).
    var checkR: [UInt8] {
        guard case .passkeyEntry = method, let passkey else { return [UInt8](repeating: 0, count: 16) }
        return [UInt8](repeating: 0, count: 12) + bigEndian(passkey)
    }

    func initiatorSendCheck() throws -> [SMPOutput] {
        guard let request else { throw PairingFailure.unspecifiedReason }
        try deriveKeys()
        let ea = try SMPToolbox.f6(w: macKey, n1: localNonce, n2: peerNonce, r: checkR, ioCap: request.ioCapField,
                                   a1: addressField(initiatorAddress), a2: addressField(responderAddress))
        phase = .waitingDHKeyCheck
        return [send(.pairingDHKeyCheck(ea.reversed()))]
    }

    func initiatorCheck(_ eb: [UInt8]) throws -> [SMPOutput] {
        guard let response else { throw PairingFailure.unspecifiedReason }
        let expected = try SMPToolbox.f6(w: macKey, n1: peerNonce, n2: localNonce, r: checkR, ioCap: response.ioCapField,
                                         a1: addressField(responderAddress), a2: addressField(initiatorAddress))
        guard eb == expected else { throw PairingFailure.dhKeyCheckFailed }
        phase = .waitingEncryption
        return [.startEncryption(ltk: ltk.reversed(), ediv: 0, rand: [UInt8](repeating: 0, count: 8))]
    }

    func responderCheck() throws -> [SMPOutput] {
        guard let request, let response, let ea = peerCheck else { throw PairingFailure.unspecifiedReason }
        // Numeric comparison waits for our own user before answering (§2.3.5.6.2).
        if (method == .numericComparison || (method == .justWorks && asksJustWorksConsent)) && !userConfirmed { return [] }
        try deriveKeys()
        let expected = try SMPToolbox.f6(w: macKey, n1: peerNonce, n2: localNonce, r: checkR, ioCap: request.ioCapField,
                                         a1: addressField(initiatorAddress), a2: addressField(responderAddress))
        guard ea == expected else { throw PairingFailure.dhKeyCheckFailed }
        let eb = try SMPToolbox.f6(w: macKey, n1: localNonce, n2: peerNonce, r: checkR, ioCap: response.ioCapField,
                                   a1: addressField(responderAddress), a2: addressField(initiatorAddress))
        phase = .waitingEncryption
        return [send(.pairingDHKeyCheck(eb.reversed()))]
    }
}
