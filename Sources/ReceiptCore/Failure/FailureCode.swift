import Foundation

/// Why a call, a job or a delivery failed: one closed set from the door to the dashboard.
///
/// Each case has one stable string (``rawValue``), which exists only at the edges: the envelope's
/// JSON, a database column, a metric label, an API's JSON. Everywhere else a failure is a case,
/// matched by the compiler, never a string compared or classified by its prefix.
///
/// A stored string this build does not know (written by a newer release, or an older one's code
/// since retired) reads as ``unrecognized(_:)``: kept and shown as it was, counted as ``FailureClass/other``.
public enum FailureCode: Sendable, Hashable, CustomStringConvertible {
    // The call itself.
    /// The call never got an HTTP answer (`transport_timeout`, `transport_could_not_connect`, …).
    case transport(TransportFailure)
    /// An HTTP error status (`http_503`): Apple's or a webhook endpoint's.
    case http(Int)
    /// Apple's `status` (`verifyReceipt`) or `errorCode` (Server API) that failed the job (`apple_21005`).
    case apple(Int)
    /// HTTP 200 with a body that is not Apple's JSON: an outage page.
    case nonJSONBody
    /// Apple kept sending the receipt back and forth between production and sandbox.
    case environmentLoop
    /// Apple answered that `verifyReceipt` is gone.
    case verifyReceiptGone
    /// Apple's rate limit (429) held the job.
    case rateLimited
    /// A transaction's history is longer than the Server API path follows.
    case historyTooLong
    /// A transaction id the Server API cannot look up (not digits).
    case invalidTransactionID
    /// A JWS in the Server API's answer was not accepted (`response_untrusted_chain`,
    /// `response_bundle_id_mismatch`, …): the trust roots, or worse; an operator must look.
    case responseRejected(JWSFailure)
    /// The Server API refused the app's key (401).
    case serverAPIUnauthorized
    /// The Server API answered something that is not what was asked.
    case malformedAnswer

    // The app's configuration: ours to fix, then retry.
    /// Apple rejects the app's shared secret (21004).
    case sharedSecretMismatch
    /// The job names an app that is no longer registered.
    case unknownApp
    /// The app has no In-App Purchase key for the Server API.
    case serverAPIKeyMissing
    /// The app's key cannot be opened (`RECEIPTQ_SECRETS_KEY`).
    case serverAPIKeyUnreadable
    /// The app's key does not sign (not a P-256 PKCS#8 key).
    case serverAPIKeyUnusable
    /// This deployment has no Server API client.
    case serverAPINotConfigured
    /// A receipt whose signature was not checked at the door cannot name a transaction for the Server API.
    case receiptNotVerifiedLocally
    /// The app's sandbox policy refuses sandbox receipts.
    case sandboxRejected

    // Our side.
    /// Postgres could not be reached for the result.
    case storeUnavailable
    /// Postgres refused the result itself (a data exception or a constraint).
    case storeRefused
    /// A notification the door accepted cannot be decoded (a bug or a changed envelope).
    case malformedNotification
    /// The job was running each time its worker died: it is not tried again.
    case poisonJob

    // Webhook deliveries.
    /// The endpoint was removed; its deliveries went with it.
    case endpointRemoved
    /// The endpoint's secret cannot be opened (`RECEIPTQ_SECRETS_KEY`).
    case webhookSecretUnreadable
    /// This worker has no webhook client.
    case webhooksNotConfigured
    /// The webhook client could not start its engine (written by releases before the clients became
    /// services; still read from the dead letters and the deliveries they left).
    case clientUnavailable
    /// The endpoint resolves only to private addresses, which it may not use.
    case addressNotAllowed

    /// A re-poll's answer no longer lists the subscription polled.
    case subscriptionNotInAnswer

    // Refund defence (Send Consumption Information).
    /// Apple's 12 hours to answer a `CONSUMPTION_REQUEST` passed before the answer got through.
    case consumptionDeadlinePassed
    /// This worker has no Server API client to answer consumption requests with.
    case consumptionNotConfigured
    /// A failure nothing classified (a report without a code or an answer): a bug to look at.
    case unknown
    /// A stored code this build does not know, kept as it was written.
    case unrecognized(String)

    /// Reads a stored code: every string ``rawValue`` writes reads back to its case.
    public init(rawValue: String) {
        if let simple = Self.simple[rawValue] {
            self = simple
        } else if let number = Self.number(after: "apple_", in: rawValue) {
            self = .apple(number)
        } else if let number = Self.number(after: "http_", in: rawValue) {
            self = .http(number)
        } else if rawValue.starts(with: "response_"), let failure = JWSFailure(rawValue: String(rawValue.dropFirst(9))) {
            self = .responseRejected(failure)
        } else if rawValue.starts(with: "transport_") {
            // A transport failure under a name this build does not know (another libcurl's) is still one.
            self = .transport(TransportFailure(rawValue: String(rawValue.dropFirst(10))) ?? .other)
        } else if let transport = TransportFailure(rawValue: rawValue) {
            // Webhook deliveries stored libcurl's name alone before this type existed.
            self = .transport(transport)
        } else {
            self = .unrecognized(rawValue)
        }
    }

    /// An operator's text (a form field, a CLI option), trimmed; nil when blank.
    public init?(text: String?) {
        guard let trimmed = text?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        self.init(rawValue: trimmed)
    }

    /// The stable string: stored in the envelope and the database, a metric label, shown and filtered by.
    public var rawValue: String {
        switch self {
        case .transport(let failure): "transport_\(failure.rawValue)"
        case .http(let status): "http_\(status)"
        case .apple(let status): "apple_\(status)"
        case .nonJSONBody: "non_json_body"
        case .environmentLoop: "environment_loop"
        case .verifyReceiptGone: "verify_receipt_gone"
        case .rateLimited: "rate_limited"
        case .historyTooLong: "history_too_long"
        case .invalidTransactionID: "invalid_transaction_id"
        case .responseRejected(let failure): "response_\(failure.reason)"
        case .serverAPIUnauthorized: "server_api_unauthorized"
        case .malformedAnswer: "malformed_answer"
        case .sharedSecretMismatch: "shared_secret_mismatch"
        case .unknownApp: "unknown_app"
        case .serverAPIKeyMissing: "server_api_key_missing"
        case .serverAPIKeyUnreadable: "server_api_key_unreadable"
        case .serverAPIKeyUnusable: "server_api_key_unusable"
        case .serverAPINotConfigured: "server_api_not_configured"
        case .receiptNotVerifiedLocally: "receipt_not_verified_locally"
        case .sandboxRejected: "sandbox_rejected"
        case .storeUnavailable: "store_unavailable"
        case .storeRefused: "store_refused"
        case .malformedNotification: "malformed_notification"
        case .poisonJob: "poison_job"
        case .endpointRemoved: "endpoint_removed"
        case .webhookSecretUnreadable: "webhook_secret_unreadable"
        case .webhooksNotConfigured: "webhooks_not_configured"
        case .clientUnavailable: "client_unavailable"
        case .addressNotAllowed: "address_not_allowed"
        case .subscriptionNotInAnswer: "subscription_not_in_answer"
        case .consumptionDeadlinePassed: "consumption_deadline_passed"
        case .consumptionNotConfigured: "consumption_not_configured"
        case .unknown: "unknown"
        case .unrecognized(let text): text
        }
    }

    public var description: String { rawValue }

    /// The class an operator acts on: the dashboard's chart and the metrics' label.
    public var failureClass: FailureClass {
        switch self {
        case .transport: .network
        case .http, .nonJSONBody: .appleHTTP
        case .apple(21000), .apple(21004), .sharedSecretMismatch, .unknownApp: .configuration
        case .apple, .environmentLoop: .appleStatus
        case .storeUnavailable, .storeRefused: .store
        case .verifyReceiptGone, .rateLimited, .historyTooLong, .invalidTransactionID, .responseRejected, .serverAPIUnauthorized,
            .malformedAnswer, .serverAPIKeyMissing, .serverAPIKeyUnreadable, .serverAPIKeyUnusable, .serverAPINotConfigured,
            .receiptNotVerifiedLocally, .sandboxRejected, .malformedNotification, .poisonJob, .endpointRemoved, .webhookSecretUnreadable,
            .webhooksNotConfigured, .clientUnavailable, .addressNotAllowed, .subscriptionNotInAnswer, .consumptionDeadlinePassed,
            .consumptionNotConfigured, .unknown,
            .unrecognized:
            .other
        }
    }

    /// The HTTP status of an ``http(_:)`` failure.
    public var httpStatus: Int? {
        guard case .http(let status) = self else { return nil }
        return status
    }

    /// The cases without a value: what ``init(rawValue:)`` reads by name. A case missing here would
    /// be written but read back as ``unrecognized(_:)``; the tests hold that each reads back to itself.
    public static let everySimpleCase: [FailureCode] = [
        .nonJSONBody, .environmentLoop, .verifyReceiptGone, .rateLimited, .historyTooLong, .invalidTransactionID,
        .serverAPIUnauthorized, .malformedAnswer, .sharedSecretMismatch, .unknownApp, .serverAPIKeyMissing, .serverAPIKeyUnreadable,
        .serverAPIKeyUnusable, .serverAPINotConfigured, .receiptNotVerifiedLocally, .sandboxRejected, .storeUnavailable, .storeRefused,
        .malformedNotification, .poisonJob, .endpointRemoved, .webhookSecretUnreadable, .webhooksNotConfigured, .clientUnavailable,
        .addressNotAllowed, .subscriptionNotInAnswer, .consumptionDeadlinePassed, .consumptionNotConfigured, .unknown,
    ]

    private static let simple: [String: FailureCode] = Dictionary(uniqueKeysWithValues: everySimpleCase.map { ($0.rawValue, $0) })

    private static func number(after prefix: String, in text: String) -> Int? {
        guard text.starts(with: prefix) else { return nil }
        let digits = text.dropFirst(prefix.count)
        guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(digits)
    }
}

/// How a call failed before any HTTP answer: the HTTP façade's classification, named in the domain so
/// that the domain does not import the façade.
public enum TransportFailure: String, Sendable, Hashable, CaseIterable {
    case couldNotResolve = "could_not_resolve"
    case couldNotConnect = "could_not_connect"
    case timeout
    case tls
    case sendFailed = "send_failed"
    case receiveFailed = "receive_failed"
    case responseTooLarge = "response_too_large"
    case unsupportedProtocol = "unsupported_protocol"
    case invalidRequest = "invalid_request"
    case cancelled
    case other
}

/// Why a job was retried or buried, in a handful of classes an operator can act on.
public enum FailureClass: String, Sendable, CaseIterable {
    /// The call never got an HTTP answer: timeout, connection refused, TLS.
    case network
    /// Apple answered with an HTTP error or a body that is not its JSON.
    case appleHTTP = "apple_http"
    /// Apple answered with a transient `status`, or kept flipping environments.
    case appleStatus = "apple_status"
    /// Ours to fix: the shared secret (21004), a malformed request (21000), an app since deleted.
    case configuration
    /// Postgres could not store the result.
    case store
    /// Anything else (an unreadable job, a code this build does not know).
    case other
}

extension FailureCode: Codable {
    /// Its stable string.
    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
    }

    /// Its stable string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
