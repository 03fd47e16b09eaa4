import Foundation

/// One call to Apple's `verifyReceipt`, for the audit trail (`validation_attempts`).
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
    /// A bounded error code (`timeout`, `http_503`, `non_json_body`, …) or nil on success.
    public var errorCode: String?

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
        errorCode: String?
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
    /// A bounded code for the dead letters and metrics when the verdict is not `.valid`/`.invalid`.
    public var errorCode: String?

    /// Creates a report.
    public init(verdict: AppleVerdict, response: VerifyReceiptResponse?, calls: [AppleCall], errorCode: String?) {
        self.verdict = verdict
        self.response = response
        self.calls = calls
        self.errorCode = errorCode
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

    /// Creates a request.
    public init(receiptData: String, sharedSecret: String?, excludeOldTransactions: Bool) {
        self.receiptData = receiptData
        self.sharedSecret = sharedSecret
        self.excludeOldTransactions = excludeOldTransactions
    }
}
