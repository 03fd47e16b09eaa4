import Foundation

/// How an app's receipts are validated with Apple.
public enum ValidationBackend: String, Sendable, Codable, CaseIterable {
    /// `verifyReceipt`, deprecated by Apple in 2023 but still answering.
    case verifyReceipt = "verify_receipt"
    /// The App Store Server API (JWT-authenticated, JWS answers).
    case serverAPI = "server_api"
    /// `verifyReceipt` while it answers; the Server API once it is gone (an app with a key only).
    case auto
    /// A record's only, never an app's: the device's StoreKit 2 transaction, verified at the door
    /// and fresh, was stored without asking Apple (the app's `jws_trust` is `local`).
    case localJWS = "local_jws"
}

/// Where an accepted job came from: what `JobEnvelope.receipt` holds.
public enum JobSource: String, Sendable, Codable, CaseIterable {
    /// An app receipt (unified or iOS 6), base64.
    case receipt
    /// A StoreKit 2 signed transaction (compact JWS) from the device, checked at the door.
    case signedTransaction = "signed_transaction"
    /// A bare transaction id: only the Server API can say what it is.
    case transactionID = "transaction_id"
    /// An App Store Server Notification: `receipt` holds the V2 `signedPayload` (checked at the
    /// door) or the V1 body without its `password`. A receipt row of this source holds the
    /// notification's signed transaction (V2) or its latest receipt (V1).
    case notification
}

/// An app's In-App Purchase key for the App Store Server API. Secret: the private key never
/// appears in a description, a log line or an error.
public struct ServerAPIKey: Sendable, Equatable, CustomStringConvertible {
    /// The issuer id of the App Store Connect team.
    public var issuerID: String
    /// The key's id (the JWT's `kid`).
    public var keyID: String
    /// The key as App Store Connect issues it: a PKCS#8 PEM (`.p8`) P-256 private key.
    public var privateKeyPEM: String

    /// Creates a key.
    public init(issuerID: String, keyID: String, privateKeyPEM: String) {
        self.issuerID = issuerID
        self.keyID = keyID
        self.privateKeyPEM = privateKeyPEM
    }

    public var description: String { "ServerAPIKey(issuer: \(issuerID), key: \(keyID), private key: <redacted>)" }
}

/// What a Server API validation asks Apple.
public struct ServerAPIQuery: Sendable, Equatable {
    /// What to call.
    public enum Operation: String, Sendable, Equatable {
        /// Get Transaction History (every page), then Get All Subscription Statuses when the
        /// history holds auto-renewable subscriptions: a first validation.
        case history
        /// Get All Subscription Statuses only: a re-poll of one subscription, or a new
        /// subscription purchase of a customer already seen (the statuses hold the latest
        /// transaction and renewal info of each of the customer's subscriptions: one call).
        case statuses
        /// Get Transaction Info (`/inApps/v1/transactions/{id}`): a purchase of a customer already
        /// seen that is not (known to be) a subscription; followed by the statuses only when the
        /// answer turns out to be an auto-renewable subscription.
        case transactionInfo = "transaction_info"
    }

    public var operation: Operation
    /// The transaction asked about (any transaction of the customer's, for history).
    public var transactionID: String
    /// The app's bundle id (the JWT's `bid`).
    public var bundleID: String
    public var key: ServerAPIKey
    /// The environment to ask first when the job already knows it (a re-poll, a signed
    /// transaction); nil: production first, sandbox on `4040010`.
    public var environment: AppStoreEnvironment?
    /// What the calls are spent on: their account, and their place in the app's hourly budget.
    public var purpose: ApplePurpose
    /// For `history`: where the customer's last read ended; the read starts there (only new
    /// transactions) when Apple answers in the cursor's environment. Nil: from the first page.
    public var historyCursor: HistoryCursor?
    /// For `history`: the customer the read's cursor is filed under (the original transaction id
    /// the planner looked the cursor up by); nil: the read's end is not kept.
    public var historyKey: String?

    /// Creates a query.
    public init(
        operation: Operation, transactionID: String, bundleID: String, key: ServerAPIKey, environment: AppStoreEnvironment? = nil,
        historyCursor: HistoryCursor? = nil, historyKey: String? = nil, purpose: ApplePurpose
    ) {
        self.historyKey = historyKey
        self.operation = operation
        self.transactionID = transactionID
        self.bundleID = bundleID
        self.key = key
        self.environment = environment
        self.purpose = purpose
        self.historyCursor = historyCursor
    }
}

/// What the Server API answered, reduced to receiptq's model: every transaction as a purchase and
/// every auto-renewable subscription's state, from signature-checked JWS only.
public struct ServerAPILedger: Sendable, Equatable {
    /// `production` or `sandbox`: the environment that knew the transaction.
    public var environment: String
    public var purchases: [InAppPurchase]
    public var subscriptions: [SubscriptionState]

    /// Creates a ledger.
    public init(environment: String, purchases: [InAppPurchase], subscriptions: [SubscriptionState]) {
        self.environment = environment
        self.purchases = purchases
        self.subscriptions = subscriptions
    }
}
