import Foundation
import ReceiptCore

/// What one App Store Server API answer means, as a pure classification (error-codes.md and the
/// environment rules in APPSTORE-REFERENCE.md).
enum ServerAPIOutcome: Equatable, Sendable {
    /// 200 with a JSON body.
    case answered(JSONValue)
    /// `4040010`: the transaction is not in this environment; the other one may know it.
    case notInThisEnvironment
    /// HTTP 401. From production this is also what an app with no live release gets.
    case unauthorized
    /// HTTP 429: run again at `until` (Apple's `Retry-After`, a UNIX time in milliseconds).
    case rateLimited(until: Date)
    /// Anything else, with its verdict and bounded error code.
    case failed(AppleVerdict, code: FailureCode)

    /// Apple's retryable error codes: temporary on Apple's side, retried with backoff.
    static let retryableCodes: Set<Int> = [4_040_002, 4_040_004, 4_040_006, 5_000_001]

    /// Classifies one HTTP response (or transport failure).
    /// - Parameters:
    ///   - status: the HTTP status, nil for a transport failure.
    ///   - body: the response body.
    ///   - retryAfter: the `Retry-After` header.
    ///   - now: the injected clock, for a 429 without a usable `Retry-After`.
    /// - Returns: the outcome, and Apple's `errorCode` when the body names one (for the audit
    ///   record: the body is read once, here).
    static func classify(status: Int?, body: [UInt8], retryAfter: String?, now: Date) -> (outcome: ServerAPIOutcome, appleCode: Int?) {
        guard let status else { return (.failed(.outage, code: .transport(.other)), nil) }
        let json = JSONValue.parseAnswer(body)
        let errorCode = json?["errorCode"]?.intValue
        return (classify(status: status, json: json, errorCode: errorCode, retryAfter: retryAfter, now: now), errorCode)
    }

    private static func classify(status: Int, json: JSONValue?, errorCode: Int?, retryAfter: String?, now: Date) -> ServerAPIOutcome {
        switch status {
        case 200:
            guard let json, json.objectValue != nil else { return .failed(.outage, code: .nonJSONBody) }
            return .answered(json)
        case 401:
            return .unauthorized
        case 429:
            return .rateLimited(until: retryAt(retryAfter, now: now))
        default:
            break
        }
        if let errorCode {
            switch errorCode {
            case 4_040_010: return .notInThisEnvironment
            case let code where retryableCodes.contains(code): return .failed(.transient, code: .apple(code))
            // 4040005 original transaction id not found, 4000xxx invalid request values, 4040001
            // account not found: Apple will not know this transaction later either.
            case 4_000_000..<4_010_000, 4_040_000..<4_050_000: return .failed(.invalid, code: .apple(errorCode))
            case 5_000_000..<6_000_000: return .failed(.outage, code: .apple(errorCode))
            default: return .failed(.transient, code: .apple(errorCode))
            }
        }
        // No Apple error body: an outage page, a proxy, a 5xx.
        return .failed(status >= 500 ? .outage : .configurationError, code: .http(status))
    }

    /// Apple's `Retry-After` is a UNIX time in milliseconds (not seconds, not delta-seconds as in
    /// RFC 9110); a small value is read as delta-seconds, and anything unusable waits a second.
    static func retryAt(_ header: String?, now: Date) -> Date {
        guard let text = header?.trimmingCharacters(in: .whitespaces), let value = Double(text), value.isFinite, value >= 0 else {
            return now.addingTimeInterval(1)
        }
        if value > 1e12 { return Date(timeIntervalSince1970: value / 1000) }
        if value > 1e9 { return Date(timeIntervalSince1970: value) }
        return now.addingTimeInterval(value)
    }
}
