import Foundation

/// Why a support action did not happen: a closed set, mapped by the admin API to a status and a
/// stable `error` string, and printed by the CLI. Never carries a key, a token or Apple's body.
public enum SupportFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// No app with that id.
    case unknownApp
    /// The app has no In-App Purchase key (or `RECEIPTQ_SECRETS_KEY` is not set to open it).
    case noServerAPIKey
    /// Apple does not know the order id (Look Up Order ID's `status` 1).
    case orderNotFound
    /// Apple does not know the transaction (or original transaction) in this environment.
    case transactionNotFound
    /// Apple refused the request's values (its `errorCode`, 4000xxx): e.g. a subscription that
    /// cannot be extended, a product with no active subscribers.
    case refusedByApple(code: Int)
    /// Apple has no test notification with that token.
    case testNotificationNotFound
    /// Apple's limit (or the shared bucket) allows the call only at this time.
    case rateLimited(until: Date)
    /// Apple refused the app's key (HTTP 401).
    case unauthorized
    /// Apple could not be reached or failed (transport error, 5xx, a retryable code).
    case appleUnavailable
    /// Apple's answer was not what the API documents, or a JWS in it did not check.
    case malformedAnswer
    /// The validation jobs could not be queued (Redis).
    case queueUnavailable

    /// The stable string of the admin API's `error` field.
    public var code: String {
        switch self {
        case .unknownApp: "unknown_app"
        case .noServerAPIKey: "no_server_api_key"
        case .orderNotFound: "order_not_found"
        case .transactionNotFound: "transaction_not_found"
        case .refusedByApple: "refused_by_apple"
        case .testNotificationNotFound: "test_notification_not_found"
        case .rateLimited: "rate_limited"
        case .unauthorized: "server_api_unauthorized"
        case .appleUnavailable: "apple_unavailable"
        case .malformedAnswer: "malformed_answer"
        case .queueUnavailable: "queue_unavailable"
        }
    }

    /// What an operator reads.
    public var description: String {
        switch self {
        case .unknownApp: "no such app"
        case .noServerAPIKey: "the app has no usable In-App Purchase key (receiptq apps server-api-key, and RECEIPTQ_SECRETS_KEY)"
        case .orderNotFound: "Apple knows no order with this id (check it against the customer's e-mailed receipt)"
        case .transactionNotFound: "Apple knows no such transaction in this environment"
        case .refusedByApple(let code): "Apple refused the request (errorCode \(code))"
        case .testNotificationNotFound: "Apple knows no test notification with this token"
        case .rateLimited(let until): "Apple's rate limit for this endpoint: try again after \(until)"
        case .unauthorized: "Apple refused the app's In-App Purchase key (HTTP 401)"
        case .appleUnavailable: "Apple could not be reached or failed; try again later"
        case .malformedAnswer: "Apple's answer could not be read or did not verify"
        case .queueUnavailable: "the validation jobs could not be queued (Redis); try again"
        }
    }

    /// Reads Apple's answer to a support call that was not a success: `errorCode` first (404's
    /// 4040010 and 4040005 are unknown transactions), then the HTTP status.
    public static func classify(status: Int, appleCode: Int?, notFound: SupportFailure = .transactionNotFound) -> SupportFailure {
        switch (status, appleCode) {
        case (401, _): return .unauthorized
        case (_, let code?) where [4_040_002, 4_040_004, 4_040_006, 5_000_001].contains(code): return .appleUnavailable
        case (_, let code?) where (4_040_000..<4_050_000).contains(code): return notFound
        case (_, let code?) where (4_000_000..<4_010_000).contains(code): return .refusedByApple(code: code)
        case (404, _): return notFound
        default: return .appleUnavailable
        }
    }
}
