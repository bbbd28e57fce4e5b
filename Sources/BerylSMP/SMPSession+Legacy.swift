import BerylCore
import BerylCrypto

extension SMPSession {
    // MARK: Legacy pairing (Core Vol 3 Part H §2.3.5.2–2.3.5.5)

    func legacyPasskeyIfNeeded() throws -> [SMPOutput] {
        switch method {
        case .justWorks:
            tk = [UInt8](repeating: 0, count: 16)
            return []
        case .numericComparison:
            throw PairingFailure.unspecifiedReason
        case .passkeyEntry(let localInputs, let remoteInputs):
            let outputs = passkeyPrompt(localInputs: localInputs, remoteInputs: remoteInputs)
            if let passkey { tk = [UInt8](repeating: 0, count: 12) + bigEndian(passkey) }
            return outputs
        }
    }

    func legacyConfirm(_ r: [UInt8]) throws -> [UInt8] {
        guard let request, let response else { throw PairingFailure.unspecifiedReason }
        let ia = initiatorAddress
        let ra = responderAddress
        return try SMPToolbox.c1(k: tk, r: r, preq: SMPPDU.pairingRequest(request).encoded.reversed(), pres: SMPPDU.pairingResponse(response).encoded.reversed(),
                                 iat: ia.type.isRandom ? 1 : 0, rat: ra.type.isRandom ? 1 : 0, ia: ia.address.bytes.reversed(), ra: ra.address.bytes.reversed())
    }

    func legacySendConfirm() throws -> [SMPOutput] {
        localNonce = random(16)
        return [send(.pairingConfirm(try legacyConfirm(localNonce).reversed()))]
    }

    func legacyAfterConfirm() throws -> [SMPOutput] {
        if isInitiator {
            // The initiator confirms first (Core Vol 3 Part H §2.3.5.5): a confirm before ours is out of turn.
            if tk.isEmpty { throw PairingFailure.unspecifiedReason }
            phase = .waitingRandom
            return [send(.pairingRandom(localNonce.reversed()))]
        }
        guard !tk.isEmpty else { return [] }  // our user has not typed the passkey yet
        phase = .waitingRandom
        return try legacySendConfirm()
    }

    func legacyAfterRandom() throws -> [SMPOutput] {
        guard let peerConfirm, peerConfirm == (try legacyConfirm(peerNonce)) else { throw PairingFailure.confirmValueFailed }
        let (srand, mrand) = isInitiator ? (peerNonce, localNonce) : (localNonce, peerNonce)
        stk = masked(try SMPToolbox.s1(k: tk, r1: srand, r2: mrand))
        phase = .waitingEncryption
        if isInitiator { return [.startEncryption(ltk: stk.reversed(), ediv: 0, rand: [UInt8](repeating: 0, count: 8))] }
        return [send(.pairingRandom(localNonce.reversed()))]
    }
}
