import DevTools
import Foundation
import ReceiptCore
import Synchronization

/// One scripted behaviour of the mock App Store.
///
/// A rule matches by bundle id and/or transaction id (nil = any receipt) and overrides what the
/// mock would answer: a JSON `status`, a delay, an HTTP error, or a non-JSON body, for `times`
/// requests (nil = until removed). The same fields can travel per request as headers
/// (`X-Mock-Status`, `X-Mock-Delay-Ms`, `X-Mock-HTTP-Status`, `X-Mock-Body`) or inside a forged
/// receipt's opaque value as `mock:status=21005,delay_ms=50`.
public struct MockRule: Sendable, Equatable, Codable {
    public var bundleID: String?
    public var transactionID: String?
    /// Answer HTTP 200 with this JSON `status`.
    public var status: Int?
    /// `is_retryable` to send with the status (21100–21199).
    public var isRetryable: Bool?
    /// Wait this long before answering.
    public var delayMs: Int?
    /// Answer with this HTTP status and a short text body instead.
    public var httpStatus: Int?
    /// `html` (an outage page with HTTP 200), `garbage`, or `empty`.
    public var body: String?
    /// How many requests the rule applies to; nil for all.
    public var times: Int?

    enum CodingKeys: String, CodingKey {
        case bundleID = "bundle_id"
        case transactionID = "transaction_id"
        case status
        case isRetryable = "is_retryable"
        case delayMs = "delay_ms"
        case httpStatus = "http_status"
        case body, times
    }

    /// Creates a rule.
    public init(
        bundleID: String? = nil, transactionID: String? = nil, status: Int? = nil, isRetryable: Bool? = nil,
        delayMs: Int? = nil, httpStatus: Int? = nil, body: String? = nil, times: Int? = nil
    ) {
        self.bundleID = bundleID
        self.transactionID = transactionID
        self.status = status
        self.isRetryable = isRetryable
        self.delayMs = delayMs
        self.httpStatus = httpStatus
        self.body = body
        self.times = times
    }

    /// Parses `status=21005,delay_ms=50,http_status=503,body=html,is_retryable=1` (the per-receipt form).
    public init?(directives text: String) {
        var rule = MockRule()
        for pair in text.split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            switch parts[0] {
            case "status": rule.status = Int(parts[1])
            case "delay_ms": rule.delayMs = Int(parts[1])
            case "http_status": rule.httpStatus = Int(parts[1])
            case "body": rule.body = parts[1]
            case "is_retryable": rule.isRetryable = JSONValue.string(parts[1]).boolValue
            default: continue
            }
        }
        guard rule != MockRule() else { return nil }
        self = rule
    }

    func matches(bundleID: String?, transactionIDs: [String]) -> Bool {
        if let wanted = self.bundleID, wanted != bundleID { return false }
        if let wanted = transactionID, !transactionIDs.contains(wanted) { return false }
        return true
    }
}

/// The mock's mutable state: rules, shared secrets per bundle id, and counters. Shared by every
/// request handler, so it is guarded by a mutex.
public final class MockAppStoreState: Sendable {
    private struct Storage {
        var rules: [MockRule] = []
        var secrets: [String: String] = [:]
        var requests: [String: Int] = [:]
        /// When the last requests arrived (at most ``arrivalsKept``), oldest first.
        var arrivals: [Date] = []
        var renewals: [String: [InAppPurchase]] = [:]
        var renewalInfo: [String: [String: JSONValue]] = [:]
    }

    private let storage = Mutex(Storage())
    /// A latency added to every answer (the benchmark's stand-in for Apple's ~50 ms).
    public let baseDelay: Duration
    /// The App Store Server API's side: its ledger, keys and rules.
    public let serverAPI: MockServerAPIState
    /// App Store Server Notifications: targets, what was sent, delivery.
    public let notifications: MockNotificationCenter

    /// Creates empty state.
    /// - Parameters:
    ///   - baseDelay: latency added to every answer.
    ///   - authority: the chain Server API answers are signed with (default: a new one; pass
    ///     ``MockAppleJWSAuthority/loadOrCreate(directory:)``'s to agree with `forge` and a deployment).
    ///   - now: Apple's clock: what the Server API's statuses and the notifications are as of (the
    ///     conformance suite's simulated time).
    public init(baseDelay: Duration = .zero, authority: MockAppleJWSAuthority? = nil, now: @escaping @Sendable () -> Date = { Date() }) {
        self.baseDelay = baseDelay
        // Key generation cannot fail short of memory exhaustion.
        self.serverAPI = MockServerAPIState(authority: try! authority ?? MockAppleJWSAuthority.generate(), now: now)
        self.notifications = MockNotificationCenter(api: serverAPI)
    }

    /// Adds a rule (later rules are consulted after earlier ones).
    public func addRule(_ rule: MockRule) { storage.withLock { $0.rules.append(rule) } }

    /// Removes every rule.
    public func clearRules() { storage.withLock { $0.rules.removeAll() } }

    /// Requires `secret` as the `password` of receipts of `bundleID` (21004 otherwise); nil removes it.
    public func setSharedSecret(_ secret: String?, for bundleID: String) {
        storage.withLock { $0.secrets[bundleID] = secret }
    }

    /// Requests answered so far, by endpoint (`production`, `sandbox`).
    public func requestCount(_ endpoint: AppStoreEnvironment) -> Int {
        storage.withLock { $0.requests[endpoint.rawValue] ?? 0 }
    }

    /// How many arrival times the mock keeps (a bench sends millions of requests).
    static let arrivalsKept = 10_000

    /// When the last requests (up to 10,000) of either endpoint arrived, oldest first: what a test
    /// of a rate limit measures, as Apple would see it.
    public func requestArrivals() -> [Date] { storage.withLock { $0.arrivals } }

    /// Adds a renewal of a subscription, as Apple would after charging the user: every later
    /// answer for a receipt holding `originalTransactionID` lists it in `latest_receipt_info`.
    public func addRenewal(_ renewal: InAppPurchase) {
        storage.withLock { $0.renewals[renewal.originalTransactionID, default: []].append(renewal) }
    }

    /// Sets fields of the subscription's `pending_renewal_info` entry (`auto_renew_status`,
    /// `is_in_billing_retry_period`, `grace_period_expires_date_ms`, `expiration_intent`, …) for
    /// every later answer; `.null` removes a field.
    public func setRenewalInfo(_ fields: [String: JSONValue], originalTransactionID: String) {
        storage.withLock { storage in
            for (key, value) in fields { storage.renewalInfo[originalTransactionID, default: [:]][key] = value }
        }
    }

    func renewals(of originalTransactionID: String) -> [InAppPurchase] { storage.withLock { $0.renewals[originalTransactionID] ?? [] } }

    func renewalInfo(of originalTransactionID: String) -> [String: JSONValue] {
        storage.withLock { $0.renewalInfo[originalTransactionID] ?? [:] }
    }

    func sharedSecret(for bundleID: String) -> String? { storage.withLock { $0.secrets[bundleID] } }

    func count(_ endpoint: AppStoreEnvironment) {
        let now = Date()
        storage.withLock { storage in
            storage.requests[endpoint.rawValue, default: 0] += 1
            storage.arrivals.append(now)
            if storage.arrivals.count > 2 * Self.arrivalsKept { storage.arrivals.removeFirst(storage.arrivals.count - Self.arrivalsKept) }
        }
    }

    /// Takes the first matching rule, consuming one of its `times`.
    func takeRule(bundleID: String?, transactionIDs: [String]) -> MockRule? {
        storage.withLock { storage in
            guard let index = storage.rules.firstIndex(where: { $0.matches(bundleID: bundleID, transactionIDs: transactionIDs) })
            else { return nil }
            let rule = storage.rules[index]
            if let times = rule.times {
                if times <= 1 { storage.rules.remove(at: index) } else { storage.rules[index].times = times - 1 }
            }
            return rule
        }
    }
}
