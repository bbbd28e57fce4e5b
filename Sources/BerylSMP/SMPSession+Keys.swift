import BerylCore
import BerylCrypto

extension SMPSession {
    // MARK: Encryption and key distribution (Core Vol 3 Part H §3.6)

    /// Peripheral: the controller asks for the key the central used; during pairing that is the STK or the new LTK.
    public func keyForEncryption(ediv: UInt16, rand: [UInt8]) -> [UInt8]? {
        guard !isInitiator, phase == .waitingEncryption, ediv == 0, rand.allSatisfy({ $0 == 0 }) else { return nil }
        return (secureConnections ? ltk : stk).reversed()
    }

    /// The link is now encrypted (or refused to be): key distribution starts, responder first.
    public func encryptionChanged(enabled: Bool, at now: Duration) -> [SMPOutput] {
        guard phase == .waitingEncryption else { return [] }
        guard enabled else { return fail(.unspecifiedReason, "encryption did not start") }
        guard let request, let response else { return [] }
        deadline = now + Self.timeout
        let sharedLTK: [UInt8]? = secureConnections ? ltk.reversed() : nil
        result = PairingResult(secureConnections: secureConnections, authenticated: method.isAuthenticated, keySize: keySize,
                               bonded: request.authRequirements.contains(.bonding) && response.authRequirements.contains(.bonding),
                               peerLTK: sharedLTK, localLTK: sharedLTK)
        var ours = isInitiator ? response.initiatorKeys : response.responderKeys
        var theirs = isInitiator ? response.responderKeys : response.initiatorKeys
        // Secure Connections derives the LTK on both sides: EncKey is ignored (§3.6.1); link keys are BR/EDR only.
        if secureConnections {
            ours.remove(.encryptionKey)
            theirs.remove(.encryptionKey)
        }
        ours.remove(.linkKey)
        theirs.remove(.linkKey)
        expectedKeys = theirs
        phase = .distributingKeys
        var outputs: [SMPOutput] = []
        ourKeys = ours
        if !isInitiator { outputs += distributeOurKeys() }
        return outputs + finishIfDone()
    }


    func distributeOurKeys() -> [SMPOutput] {
        sentOurKeys = true
        var outputs: [SMPOutput] = []
        if ourKeys.contains(.encryptionKey) {
            let key = Array(masked(random(16)).reversed())
            let rand = random(8)
            let divider = random(2)
            let ediv = UInt16(divider[0]) | UInt16(divider[1]) << 8
            result?.localLTK = key
            result?.localEDIV = ediv
            result?.localRand = rand
            outputs += [send(.encryptionInformation(ltk: key)), send(.centralIdentification(ediv: ediv, rand: rand))]
        }
        if ourKeys.contains(.identityKey) {
            outputs += [send(.identityInformation(irk: identity.irk)), send(.identityAddressInformation(identity.address))]
        }
        if ourKeys.contains(.signingKey) {
            let csrk = random(16)
            result?.localCSRK = csrk
            outputs.append(send(.signingInformation(csrk: csrk)))
        }
        return outputs
    }

    func takeKey(_ pdu: SMPPDU) throws -> [SMPOutput] {
        // Keys arrive in a fixed order; each is checked against what was negotiated (§3.6.1).
        switch pdu {
        case .encryptionInformation(let key) where expectedKeys.contains(.encryptionKey) && result?.peerLTK == nil:
            result?.peerLTK = key
        case .centralIdentification(let ediv, let rand) where expectedKeys.contains(.encryptionKey) && result?.peerLTK != nil:
            result?.peerEDIV = ediv
            result?.peerRand = rand
            expectedKeys.remove(.encryptionKey)
        case .identityInformation(let irk) where expectedKeys.contains(.identityKey) && !pendingIdentityAddress:
            result?.peerIRK = irk
            pendingIdentityAddress = true
        case .identityAddressInformation(let address) where pendingIdentityAddress:
            // A static random identity must have its two top bits set (Core Vol 6 Part B §1.3.2.1).
            guard !address.type.isRandom || address.address.randomKind == .static else { throw PairingFailure.invalidParameters }
            result?.peerIdentity = address
            pendingIdentityAddress = false
            expectedKeys.remove(.identityKey)
        case .signingInformation(let csrk) where expectedKeys.contains(.signingKey) && !pendingIdentityAddress:
            result?.peerCSRK = csrk
            expectedKeys.remove(.signingKey)
        default:
            throw PairingFailure.unspecifiedReason
        }
        return finishIfDone()
    }

    func finishIfDone() -> [SMPOutput] {
        guard phase == .distributingKeys, expectedKeys.isEmpty, !pendingIdentityAddress else { return [] }
        var outputs: [SMPOutput] = []
        if isInitiator && !sentOurKeys { outputs += distributeOurKeys() }
        phase = .done
        deadline = nil
        if let result { outputs.append(.completed(result)) }
        return outputs
    }
}
