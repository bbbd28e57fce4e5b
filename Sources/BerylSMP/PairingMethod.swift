/// How the two users take part (Core Vol 3 Part H §2.3.5.1, Tables 2.6–2.8), seen from one side.
public enum PairingMethod: Equatable, Sendable {
    case justWorks
    /// Both show a six-digit number and both users confirm it matches (Secure Connections only).
    case numericComparison
    /// One side shows a passkey the other's user types, or both users type the same one.
    case passkeyEntry(localInputs: Bool, remoteInputs: Bool)

    /// Whether the key it yields is protected against a man in the middle.
    public var isAuthenticated: Bool { self != .justWorks }

    /// The model both sides arrive at from the exchanged features. `weAreInitiator` orients the passkey roles.
    public static func select(initiator: PairingFeatures, responder: PairingFeatures, secureConnections: Bool, weAreInitiator: Bool) -> PairingMethod {
        // Without MITM asked on either side the IO capabilities do not matter (§2.3.5.1).
        guard initiator.authRequirements.contains(.mitm) || responder.authRequirements.contains(.mitm) else { return .justWorks }
        let i = initiator.ioCapability
        let r = responder.ioCapability
        // Passkey roles as (initiator types, responder types).
        let passkey: (Bool, Bool)?
        switch (i, r) {
        case (.noInputNoOutput, _), (_, .noInputNoOutput):
            return .justWorks
        case (.displayOnly, .displayOnly), (.displayOnly, .displayYesNo), (.displayYesNo, .displayOnly):
            return .justWorks
        case (.displayYesNo, .displayYesNo):
            return secureConnections ? .numericComparison : .justWorks
        case (.displayYesNo, .keyboardDisplay), (.keyboardDisplay, .displayYesNo), (.keyboardDisplay, .keyboardDisplay):
            if secureConnections { return .numericComparison }
            passkey = i == .displayYesNo ? (false, true) : (true, false)
        case (.displayOnly, .keyboardOnly), (.displayOnly, .keyboardDisplay), (.displayYesNo, .keyboardOnly), (.keyboardDisplay, .keyboardOnly):
            passkey = (false, true)
        case (.keyboardOnly, .displayOnly), (.keyboardOnly, .displayYesNo), (.keyboardOnly, .keyboardDisplay), (.keyboardDisplay, .displayOnly):
            passkey = (true, false)
        case (.keyboardOnly, .keyboardOnly):
            passkey = (true, true)
        }
        guard let (initiatorTypes, responderTypes) = passkey else { return .justWorks }
        return weAreInitiator ? .passkeyEntry(localInputs: initiatorTypes, remoteInputs: responderTypes)
            : .passkeyEntry(localInputs: responderTypes, remoteInputs: initiatorTypes)
    }
}
