import Foundation

/// How much an app trusts a StoreKit 2 transaction the device sent, once the door verified it
/// (Apple's signature, chain at `signedDate`, bundle id): issue 42's call budget per validation.
public enum JWSTrust: String, Sendable, Equatable, CaseIterable {
    /// A verified transaction signed within the app's freshness window is stored as the door read
    /// it, without any call to Apple. Apple's notifications (V2) then keep it current, which is why
    /// this is the default of an app whose notification URL is set up.
    case local
    /// Apple is asked once per purchase (Get Transaction Info, or the subscription's statuses).
    case apple
}

/// An app's call-budget settings: the trust it gives a door-verified JWS and how fresh that JWS
/// must be. `trust` nil means the default, which depends on whether the app receives notifications.
public struct JWSTrustSettings: Sendable, Equatable {
    /// The default freshness window: a day of the transaction's `signedDate`.
    public static let defaultFreshness: TimeInterval = 24 * 3600

    /// The operator's choice; nil: ``JWSTrust/local`` when V2 notifications are configured, else
    /// ``JWSTrust/apple``.
    public var trust: JWSTrust?
    /// How long after Apple signed it a transaction may be trusted locally.
    public var freshness: TimeInterval

    /// Creates settings.
    public init(trust: JWSTrust? = nil, freshness: TimeInterval = Self.defaultFreshness) {
        self.trust = trust
        self.freshness = freshness
    }

    /// The trust in force for an app that does (or does not) have V2 notifications configured.
    public func effective(receivesNotifications: Bool) -> JWSTrust {
        trust ?? (receivesNotifications ? .local : .apple)
    }

    /// Whether a transaction Apple signed at `signedDate` is fresh at `now`. A date more than five
    /// minutes ahead of the clock is not: Apple does not sign in the future.
    public func isFresh(signedDate: Date, at now: Date) -> Bool {
        let age = now.timeIntervalSince(signedDate)
        return age >= -300 && age <= freshness
    }
}

/// What an operator sets an app's trust to: one of the two, or back to the default.
public enum JWSTrustChoice: String, Sendable, Equatable, CaseIterable {
    case local
    case apple
    /// No choice of the operator's: ``JWSTrust/local`` with V2 notifications, else ``JWSTrust/apple``.
    case automatic = "default"

    /// The stored value: nil for the default.
    public var trust: JWSTrust? {
        switch self {
        case .local: .local
        case .apple: .apple
        case .automatic: nil
        }
    }
}
