/// What to do with one answer (or failure) of Apple's `verifyReceipt`.
///
/// The table is APPSTORE-REFERENCE.md's "Status codes and how to handle them": the HTTP status
/// says little, the JSON `status` says what happened, and an outage can look like HTTP 200.
public enum AppleVerdict: Sendable, Equatable {
    /// The receipt is valid (0), or valid with an expired iOS 6 subscription (21006).
    case valid
    /// Apple will never accept this receipt (21003, 21010, …): stored as invalid.
    case invalid
    /// Resend to the other environment at once (21007 → sandbox, 21008 → production): not a retry.
    case switchEnvironment(to: AppStoreEnvironment)
    /// Apple had a temporary problem with this receipt: retry with backoff.
    case transient
    /// A configuration error of ours (21004: shared secret mismatch, 21000: malformed request):
    /// park the job in the dead letters until an operator fixes the setting.
    case configurationError
    /// Apple itself is failing (transport error, 5xx, 429, a non-JSON body): back off without
    /// blaming the receipt.
    case outage
}

/// The two `verifyReceipt` endpoints.
public enum AppStoreEnvironment: String, Sendable, Codable, CaseIterable {
    case production
    case sandbox
}

/// Classifies Apple's `status` values and transport outcomes. Pure, so it is tested exhaustively.
public enum AppleStatus {
    /// Classifies a JSON `status` from `environment`'s endpoint.
    /// - Parameters:
    ///   - status: the `status` field of the answer.
    ///   - isRetryable: Apple's `is_retryable` / `is-retryable`, when present (only for 21100–21199).
    ///   - environment: the endpoint that answered.
    /// - Returns: what to do next.
    public static func verdict(status: Int, isRetryable: Bool?, from environment: AppStoreEnvironment) -> AppleVerdict {
        switch status {
        case 0, 21006:
            return .valid
        case 21007:
            // A sandbox receipt at production; the sandbox itself has answered 21007 by mistake,
            // and the caller caps the flips at one each way.
            return environment == .production ? .switchEnvironment(to: .sandbox) : .transient
        case 21008:
            return environment == .sandbox ? .switchEnvironment(to: .production) : .transient
        case 21004, 21000:
            return .configurationError
        case 21003, 21010:
            return .invalid
        case 21002, 21001:
            // 21002 is "malformed" or "temporary issue": it spiked in Apple's outages, and our
            // local decode already vouched for the bytes, so a few retries are worth it.
            return .transient
        case 21005, 21009:
            return .transient
        case 21100...21199:
            // Apple says whether to retry; when it does not say, retry (with the usual cap).
            return isRetryable == false ? .invalid : .transient
        default:
            return .transient
        }
    }

    /// Classifies an HTTP answer whose body was not a `verifyReceipt` JSON object.
    /// - Parameter httpStatus: the HTTP status code, or nil for a transport error.
    public static func verdictForFailedCall(httpStatus: Int?) -> AppleVerdict {
        // Transport errors, 5xx, 429 and HTML "outage pages" served with 200 all mean Apple is not
        // answering; never mistake them for an invalid receipt.
        .outage
    }
}
