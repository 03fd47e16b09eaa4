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

/// The result of validating one receipt with Apple: every call made and the final verdict.
public struct VerificationReport: Sendable, Equatable {
    /// The verdict of the last call.
    public var verdict: AppleVerdict
    /// Apple's final answer, when the last call produced one.
    public var response: VerifyReceiptResponse?
    /// Every call, in order (production, then maybe sandbox, then maybe production).
    public var calls: [AppleCall]
    /// Why, for the dead letters and metrics, when the verdict is not `.valid`; nil when Apple's
    /// own status says it (``VerifyReceiptResponse/status``).
    public var errorCode: FailureCode?
    /// The Server API's answer, reduced to purchases and subscription states (nil on the
    /// `verifyReceipt` path, where `response` holds Apple's answer).
    public var ledger: ServerAPILedger?
    /// Set when the Server API's rate limit (Apple's `429`, or the app's shared bucket) stopped
    /// the attempt: run the job again at this time without counting an attempt against it.
    public var rateLimitedUntil: Date?
    /// Which API the report comes from.
    public var backend: ValidationBackend
    /// What `verifyReceipt` said about itself (gone, deprecation and sunset dates), when it did.
    public var notice: VerifyReceiptNotice?

    /// Creates a report.
    public init(
        verdict: AppleVerdict, response: VerifyReceiptResponse?, calls: [AppleCall], errorCode: FailureCode?, ledger: ServerAPILedger? = nil,
        rateLimitedUntil: Date? = nil, backend: ValidationBackend = .verifyReceipt
    ) {
        self.backend = backend
        self.verdict = verdict
        self.response = response
        self.calls = calls
        self.errorCode = errorCode
        self.ledger = ledger
        self.rateLimitedUntil = rateLimitedUntil
    }
}

/// What the worker needs to validate one receipt.
public struct VerificationRequest: Sendable, Equatable {
    /// The receipt, base64.
    public var receiptData: String
    /// The app's shared secret (`password`), if it has one.
    public var sharedSecret: String?
    /// `exclude-old-transactions`.
    public var excludeOldTransactions: Bool
    /// Set to validate with the App Store Server API instead of `verifyReceipt`.
    public var serverAPI: ServerAPIQuery?
    /// Set when `auto` sends this app to the Server API for the first time (verifyReceipt is
    /// retired): storing the result also records the app's switch.
    public var switchesApp: Bool = false

    /// Creates a request.
    public init(receiptData: String, sharedSecret: String?, excludeOldTransactions: Bool, serverAPI: ServerAPIQuery? = nil) {
        self.receiptData = receiptData
        self.sharedSecret = sharedSecret
        self.excludeOldTransactions = excludeOldTransactions
        self.serverAPI = serverAPI
    }
}
