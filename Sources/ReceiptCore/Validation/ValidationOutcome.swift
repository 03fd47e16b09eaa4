import Foundation

/// One call to Apple (`verifyReceipt` or the App Store Server API), for the audit trail
/// (`validation_attempts`). For the Server API, `appleStatus` is Apple's `errorCode` (`4040010`, …).
public struct AppleCall: Sendable, Equatable, Codable {
    /// Which endpoint was called.
    public var endpoint: AppStoreEnvironment
    /// HTTP status, or nil for a transport failure.
    public var httpStatus: Int?
    /// Apple's JSON `status`, or nil when the body was not Apple's JSON.
    public var appleStatus: Int?
    /// Apple's retry hint, when given.
    public var isRetryable: Bool?
    /// Wall time of the call in milliseconds.
    public var latencyMs: Int
    /// Why the call failed (`transport_timeout`, `http_503`, `non_json_body`, …), or nil on success.
    public var errorCode: FailureCode?

    enum CodingKeys: String, CodingKey {
        case endpoint
        case httpStatus = "http_status"
        case appleStatus = "apple_status"
        case isRetryable = "is_retryable"
        case latencyMs = "latency_ms"
        case errorCode = "error_code"
    }

    /// Creates a record of one call.
    public init(
        endpoint: AppStoreEnvironment, httpStatus: Int?, appleStatus: Int?, isRetryable: Bool?, latencyMs: Int,
        errorCode: FailureCode?
    ) {
        self.endpoint = endpoint
        self.httpStatus = httpStatus
        self.appleStatus = appleStatus
        self.isRetryable = isRetryable
        self.latencyMs = latencyMs
        self.errorCode = errorCode
    }
}

/// What Apple said about one validation, whichever of its APIs answered: the one thing the
/// validation port returns. `verifyReceipt`'s JSON and the Server API's signed transactions stay
/// behind the port (in the App Store client): the planner reads purchases and subscription states.
public struct ValidationOutcome: Sendable, Equatable {
    /// The verdict of the last call.
    public var verdict: AppleVerdict
    /// `production` or `sandbox`: the environment that answered, when one did.
    public var environment: String?
    /// `verifyReceipt`'s `status`, when it gave one (nil on the Server API).
    public var appleStatus: Int?
    /// Every purchase Apple's answer lists.
    public var purchases: [InAppPurchase]
    /// Every auto-renewable subscription's state in Apple's answer, computed when it arrived.
    public var subscriptions: [SubscriptionState]
    /// `verifyReceipt`'s `latest_receipt`, to re-send at the next re-poll.
    public var latestReceipt: String?
    /// Every call, in order (production, then maybe sandbox, then maybe production).
    public var calls: [AppleCall]
    /// Why, when the verdict is not `.valid` (nil when Apple's own ``appleStatus`` says it).
    public var failure: FailureCode?
    /// Set when a rate limit (Apple's `429`, or the app's shared bucket) stopped the attempt: run
    /// the job again at this time without counting an attempt against it.
    public var rateLimitedUntil: Date?
    /// Which API answered.
    public var backend: ValidationBackend
    /// What `verifyReceipt` said about itself (gone, deprecation and sunset dates), when it did.
    public var notice: VerifyReceiptNotice?
    /// Where a Server API history read ended (nil: none was read).
    public var historyCursor: HistoryCursor?

    /// Creates an outcome.
    public init(
        verdict: AppleVerdict, environment: String? = nil, appleStatus: Int? = nil, purchases: [InAppPurchase] = [],
        subscriptions: [SubscriptionState] = [], latestReceipt: String? = nil, calls: [AppleCall], failure: FailureCode? = nil,
        rateLimitedUntil: Date? = nil, backend: ValidationBackend = .verifyReceipt, notice: VerifyReceiptNotice? = nil
    ) {
        self.verdict = verdict
        self.environment = environment
        self.appleStatus = appleStatus
        self.purchases = purchases
        self.subscriptions = subscriptions
        self.latestReceipt = latestReceipt
        self.calls = calls
        self.failure = failure
        self.rateLimitedUntil = rateLimitedUntil
        self.backend = backend
        self.notice = notice
    }

    /// The outcome of a `verifyReceipt` answer (or of its failed call, without one), its
    /// subscriptions computed at `at`.
    public init(
        verdict: AppleVerdict, response: VerifyReceiptResponse?, calls: [AppleCall], failure: FailureCode?, at: Date,
        notice: VerifyReceiptNotice? = nil
    ) {
        let purchases = response?.purchases ?? []
        self.init(
            verdict: verdict, environment: response?.environment?.lowercased(), appleStatus: response?.status,
            purchases: purchases.map(\.purchase),
            subscriptions: response.map { SubscriptionState.states(from: $0, purchases: purchases, at: at) } ?? [],
            latestReceipt: response?.latestReceipt, calls: calls, failure: failure, notice: notice)
    }

    /// The outcome of a Server API answer reduced to its ledger.
    /// - Parameter historyCursor: where the history read ended, when one was read.
    public init(ledger: ServerAPILedger, calls: [AppleCall], historyCursor: HistoryCursor? = nil) {
        self.init(
            verdict: .valid, environment: ledger.environment, purchases: ledger.purchases, subscriptions: ledger.subscriptions, calls: calls,
            backend: .serverAPI)
        self.historyCursor = historyCursor
    }
}

/// What the worker asks Apple, decided by the planner: one of the two APIs.
public enum ValidationRequest: Sendable, Equatable, CustomStringConvertible {
    /// `verifyReceipt`: the receipt (base64), the app's shared secret (`password`), if it has one,
    /// and `exclude-old-transactions`.
    case verifyReceipt(receiptData: String, sharedSecret: String?, excludeOldTransactions: Bool)
    /// The App Store Server API.
    case serverAPI(ServerAPIQuery)

    /// The Server API query, when it is one.
    public var serverAPI: ServerAPIQuery? {
        guard case .serverAPI(let query) = self else { return nil }
        return query
    }

    /// Without the receipt or the shared secret, so a request interpolated into a log line leaks
    /// neither (the query's key describes itself redacted).
    public var description: String {
        switch self {
        case .verifyReceipt(let receipt, let secret, let excludeOld):
            "verifyReceipt(receipt: \(receipt.utf8.count) bytes, shared secret: \(secret == nil ? "none" : "<redacted>"), exclude old: \(excludeOld))"
        case .serverAPI(let query):
            "serverAPI(\(query.operation), transaction: \(query.transactionID), environment: \(query.environment?.rawValue ?? "any"))"
        }
    }
}
