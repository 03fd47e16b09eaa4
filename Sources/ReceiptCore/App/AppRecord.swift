import Foundation

/// A registered app: its bundle id and the shared secret it validates with.
public struct AppRecord: Sendable, Equatable, CustomStringConvertible {
    public var id: UUID
    public var name: String
    /// The app's main bundle id.
    public var bundleID: String
    /// Every bundle id whose receipts belong to this app (the main one first): an app family such as
    /// an iOS app and its macOS or older editions, sharing purchases.
    public var bundleIDs: [String]
    /// Apple's app-specific shared secret (`password`). Secret: never logged or shown.
    public var sharedSecret: String?
    public var excludeOldTransactions: Bool
    /// How its receipts are validated (`auto` unless an operator chose).
    public var backend: ValidationBackend
    /// Set once `auto` found `verifyReceipt` gone and moved the app to the Server API.
    public var switchedToServerAPIAt: Date?
    /// The In-App Purchase key for the Server API, decrypted. Secret: never logged or shown.
    public var serverAPIKey: ServerAPIKey?
    /// The key's id whenever one is registered, even when it could not be decrypted (then
    /// `serverAPIKey` is nil: the deployment's `RECEIPTQ_SECRETS_KEY` is wrong or missing).
    public var serverAPIKeyID: String?
    /// Apple's numeric app id, when known (checked against signed payloads' `appAppleId`).
    public var appAppleID: Int64?
    /// What happens to sandbox purchases in production.
    public var sandboxPolicy: SandboxPolicy
    /// Whether `identifier_for_vendor` is checked against the receipt's device hash.
    public var checksDevice: Bool
    /// The call budget's settings: how far a door-verified StoreKit 2 transaction is trusted.
    public var jwsTrust: JWSTrustSettings = JWSTrustSettings()
    /// Whether the app's App Store Server Notifications V2 URL is set up (a token issued).
    public var receivesNotifications: Bool = false

    /// Creates an app record.
    public init(
        id: UUID, name: String, bundleID: String, otherBundleIDs: [String] = [], sharedSecret: String?,
        excludeOldTransactions: Bool = false, backend: ValidationBackend = .auto, switchedToServerAPIAt: Date? = nil,
        serverAPIKey: ServerAPIKey? = nil, appAppleID: Int64? = nil, sandboxPolicy: SandboxPolicy = .accept, checksDevice: Bool = true
    ) {
        self.backend = backend
        self.switchedToServerAPIAt = switchedToServerAPIAt
        self.serverAPIKey = serverAPIKey
        self.serverAPIKeyID = serverAPIKey?.keyID
        self.appAppleID = appAppleID
        self.sandboxPolicy = sandboxPolicy
        self.checksDevice = checksDevice
        self.id = id
        self.name = name
        self.bundleID = bundleID
        self.bundleIDs = [bundleID] + otherBundleIDs.filter { $0 != bundleID }
        self.sharedSecret = sharedSecret
        self.excludeOldTransactions = excludeOldTransactions
    }

    /// The backend a receipt job of this app uses now: `auto` means the Server API once
    /// `verifyReceipt` is gone for it (and it has a key), `verifyReceipt` until then.
    public var effectiveBackend: ValidationBackend {
        switch backend {
        case .verifyReceipt: .verifyReceipt
        case .serverAPI: .serverAPI
        case .auto: switchedToServerAPIAt != nil && serverAPIKey != nil ? .serverAPI : .verifyReceipt
        // Never an app's backend (the store refuses it): the Server API is what such an app uses.
        case .localJWS: .serverAPI
        }
    }

    /// The trust this app gives a door-verified JWS now (its setting, or the default).
    public var effectiveJWSTrust: JWSTrust { jwsTrust.effective(receivesNotifications: receivesNotifications) }

    /// Whether a receipt of `bundleID` belongs to this app.
    public func owns(bundleID: String?) -> Bool {
        guard let bundleID else { return false }
        return bundleIDs.contains(bundleID)
    }

    public var description: String {
        "AppRecord(id: \(id), name: \(name), bundleID: \(bundleID), sharedSecret: \(sharedSecret == nil ? "none" : "<redacted>"), backend: \(backend.rawValue), serverAPIKey: \(serverAPIKey == nil ? "none" : "<redacted>"))"
    }
}
