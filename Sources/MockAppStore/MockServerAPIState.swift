import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import Synchronization

/// The mock App Store Server API's world: a ledger of StoreKit 2 transactions per environment,
/// the In-App Purchase keys it accepts, scripted failures, and how `verifyReceipt` describes its
/// own end. Thread-safe.
public final class MockServerAPIState: Sendable {
    /// A scripted answer for the next `count` matching calls.
    public struct Rule: Sendable, Equatable, Codable {
        /// Calls it applies to (at least one).
        public var count: Int
        /// Only calls whose path (after `/storekit/{environment}`) starts with this.
        public var pathPrefix: String?
        public var httpStatus: Int?
        /// Apple's `errorCode` in the body.
        public var errorCode: Int?
        /// `Retry-After` as Apple sends it: a UNIX time in milliseconds (with `httpStatus` 429).
        public var retryAfterMs: Int64?
        public var delayMs: Int?

        enum CodingKeys: String, CodingKey {
            case count
            case pathPrefix = "path_prefix"
            case httpStatus = "http_status"
            case errorCode = "error_code"
            case retryAfterMs = "retry_after_ms"
            case delayMs = "delay_ms"
        }

        /// Creates a rule.
        public init(
            count: Int = 1, pathPrefix: String? = nil, httpStatus: Int? = nil, errorCode: Int? = nil, retryAfterMs: Int64? = nil,
            delayMs: Int? = nil
        ) {
            self.count = count
            self.pathPrefix = pathPrefix
            self.httpStatus = httpStatus
            self.errorCode = errorCode
            self.retryAfterMs = retryAfterMs
            self.delayMs = delayMs
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                count: try container.decodeIfPresent(Int.self, forKey: .count) ?? 1,
                pathPrefix: try container.decodeIfPresent(String.self, forKey: .pathPrefix),
                httpStatus: try container.decodeIfPresent(Int.self, forKey: .httpStatus),
                errorCode: try container.decodeIfPresent(Int.self, forKey: .errorCode),
                retryAfterMs: try container.decodeIfPresent(Int64.self, forKey: .retryAfterMs),
                delayMs: try container.decodeIfPresent(Int.self, forKey: .delayMs))
        }
    }

    /// A key the mock accepts JWTs from.
    struct Key {
        var issuerID: String
        var bundleID: String
        var publicKey: PublicKey
    }

    /// How `verifyReceipt` answers about itself.
    public struct VerifyReceiptLifecycle: Sendable, Equatable, Codable {
        /// Answer every call with `goneStatus` (404 or 410) instead of validating.
        public var gone: Bool
        public var goneStatus: Int
        /// Header values sent with every answer, as given (`@1767225600`, an HTTP-date).
        public var deprecation: String?
        public var sunset: String?

        enum CodingKeys: String, CodingKey {
            case gone, deprecation, sunset
            case goneStatus = "status"
        }

        /// Creates a lifecycle.
        public init(gone: Bool = false, goneStatus: Int = 410, deprecation: String? = nil, sunset: String? = nil) {
            self.gone = gone
            self.goneStatus = goneStatus
            self.deprecation = deprecation
            self.sunset = sunset
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                gone: try container.decodeIfPresent(Bool.self, forKey: .gone) ?? false,
                goneStatus: try container.decodeIfPresent(Int.self, forKey: .goneStatus) ?? 410,
                deprecation: try container.decodeIfPresent(String.self, forKey: .deprecation),
                sunset: try container.decodeIfPresent(String.self, forKey: .sunset))
        }
    }

    private struct Storage {
        /// Transactions by environment, then id; each with the customer it belongs to.
        var transactions: [AppStoreEnvironment: [String: (customer: String, payload: JSONValue)]] = [:]
        /// Insertion order per environment and customer (history is in purchase order).
        var customers: [AppStoreEnvironment: [String: [String]]] = [:]
        var renewals: [AppStoreEnvironment: [String: [String: JSONValue]]] = [:]
        var keys: [String: Key] = [:]
        var unreleased: Set<String> = []
        var rules: [Rule] = []
        var outage: DateInterval?
        var calls: [String: Int] = [:]
        /// When each subscription (by environment, then original transaction id) was asked about
        /// in a call answered 200, oldest first.
        var answered: [AppStoreEnvironment: [String: [Date]]] = [:]
        var lifecycle = VerifyReceiptLifecycle()
        var acceptedTokens: [String] = []
        var synthesizes = false
    }

    private let storage = Mutex(Storage())
    /// The chain the mock signs with; a deployment trusting the mock trusts `authority.root`.
    public let authority: MockAppleJWSAuthority

    /// Extensions' request identifiers and mass extensions (`MockServerAPI+Support.swift`).
    public let support = MockSupportState()

    /// Apple's clock: what statuses, renewals, refunds and signatures are dated by. The machine's,
    /// or the conformance suite's simulated time.
    public let now: @Sendable () -> Date

    /// Creates an empty world signing with `authority`, its time read from `now`.
    public init(authority: MockAppleJWSAuthority, now: @escaping @Sendable () -> Date = { Date() }) {
        self.authority = authority
        self.now = now
    }

    /// Apple's clock in whole milliseconds since 1970, as every date the mock signs: whatever it
    /// compares with a signed date reads this, never the raw clock (at the instant a period ends,
    /// the raw clock a fraction of a millisecond before the rounded expiry called it still active,
    /// and a failed renewal's notification said status 1).
    var nowMilliseconds: Double { (now().timeIntervalSince1970 * 1000).rounded() }

    /// A transaction as signed now (`signedDate`).
    func signed(_ transaction: JSONValue) -> JSONValue {
        var object = transaction.objectValue ?? [:]
        object["signedDate"] = .number(nowMilliseconds)
        return .object(object)
    }

    // MARK: Ledger

    /// Records transactions (Apple's `JWSTransactionDecodedPayload` field names) in `environment`,
    /// all of one customer: Get Transaction History of any of them lists them all.
    public func add(transactions: [JSONValue], environment: AppStoreEnvironment) {
        guard let first = transactions.first?["originalTransactionId"]?.stringValue ?? transactions.first?["transactionId"]?.stringValue
        else { return }
        storage.withLock { storage in
            // A customer already known by one of the originals keeps its key.
            let known = transactions.compactMap { $0["originalTransactionId"]?.stringValue }
                .compactMap { storage.transactions[environment]?[$0]?.customer }.first
            let customer = known ?? first
            for transaction in transactions {
                guard let id = transaction["transactionId"]?.stringValue else { continue }
                var payload = transaction.objectValue ?? [:]
                payload["environment"] = .string(environment == .production ? "Production" : "Sandbox")
                if storage.transactions[environment]?[id] == nil { storage.customers[environment, default: [:]][customer, default: []].append(id) }
                storage.transactions[environment, default: [:]][id] = (customer, .object(payload))
            }
        }
    }

    /// Records every purchase of a receipt as StoreKit 2 transactions of one customer, so the
    /// same purchase can be validated through either API.
    public func add(receipt: AppReceipt, environment: AppStoreEnvironment) {
        add(transactions: receipt.inApp.map { Self.payload($0, bundleID: receipt.bundleID) }, environment: environment)
    }

    /// Sets renewal-info fields of a subscription (`autoRenewStatus`, `isInBillingRetryPeriod`,
    /// `gracePeriodExpiresDate`, `expirationIntent`, …).
    public func setRenewal(_ fields: [String: JSONValue], originalTransactionID: String, environment: AppStoreEnvironment) {
        storage.withLock { $0.renewals[environment, default: [:]][originalTransactionID, default: [:]].merge(fields) { _, new in new } }
    }

    /// A purchase in Apple's StoreKit 2 shape.
    public static func payload(_ purchase: InAppPurchase, bundleID: String) -> JSONValue {
        var object: [String: JSONValue] = [
            "transactionId": .string(purchase.transactionID),
            "originalTransactionId": .string(purchase.originalTransactionID.isEmpty ? purchase.transactionID : purchase.originalTransactionID),
            "bundleId": .string(bundleID), "productId": .string(purchase.productID), "quantity": .number(Double(purchase.quantity)),
            "type": .string(purchase.expiresDate == nil ? "Non-Consumable" : "Auto-Renewable Subscription"),
            "inAppOwnershipType": .string(purchase.ownershipType ?? "PURCHASED"), "transactionReason": .string("PURCHASE"),
            "storefront": .string(purchase.storefront ?? "USA"),
        ]
        // Apple signs what the customer paid: the purchase's price, else the mock's 9.99 USD.
        if let price = purchase.price ?? Money(milli: 9990, currency: "USD") {
            object["price"] = .number(Double(price.milli))
            object["currency"] = .string(price.currency.rawValue)
        }
        func ms(_ date: Date?) -> JSONValue? { date.map { .number(($0.timeIntervalSince1970 * 1000).rounded()) } }
        object["purchaseDate"] = ms(purchase.purchaseDate ?? Date())
        object["originalPurchaseDate"] = ms(purchase.originalPurchaseDate ?? purchase.purchaseDate ?? Date())
        object["expiresDate"] = ms(purchase.expiresDate)
        object["revocationDate"] = ms(purchase.cancellationDate)
        if let line = purchase.webOrderLineItemID { object["webOrderLineItemId"] = .string(line) }
        if purchase.expiresDate != nil { object["subscriptionGroupIdentifier"] = .string("group-\(bundleID)") }
        if let offer = purchase.offer {
            object["offerType"] = .number(Double(offer.type.appleCode))
            object["offerIdentifier"] = offer.identifier.map(JSONValue.string)
            object["offerDiscountType"] = offer.discountType.map(JSONValue.string)
            object["offerPeriod"] = offer.period.map(JSONValue.string)
        } else if purchase.isInIntroOfferPeriod || purchase.isTrialPeriod {
            object["offerType"] = .number(1)
            if purchase.isTrialPeriod { object["offerDiscountType"] = .string("FREE_TRIAL") }
        }
        return .object(object)
    }

    func transaction(_ id: String, in environment: AppStoreEnvironment) -> JSONValue? {
        storage.withLock { $0.transactions[environment]?[id]?.payload }
    }

    /// Every transaction of the customer `id` belongs to, in the order they were recorded.
    func history(of id: String, in environment: AppStoreEnvironment) -> [JSONValue]? {
        storage.withLock { storage in
            guard let customer = storage.transactions[environment]?[id]?.customer else { return nil }
            return (storage.customers[environment]?[customer] ?? []).compactMap { storage.transactions[environment]?[$0]?.payload }
        }
    }

    /// A subscription as Get All Subscription Statuses and notifications describe it: its latest
    /// transaction among `transactions`, Apple's status (1 active, 2 expired, 3 billing retry, 4
    /// grace, 5 revoked) and its renewal info.
    func subscription(
        _ original: String, among transactions: [JSONValue], in environment: AppStoreEnvironment
    ) -> (latest: JSONValue, status: Int, renewal: JSONValue)? {
        let now = nowMilliseconds
        let mine = transactions.filter { $0["originalTransactionId"]?.stringValue == original && $0["expiresDate"] != nil }
        guard let latest = mine.max(by: { MockServerAPI.expires($0) < MockServerAPI.expires($1) }) else { return nil }
        let renewal = self.renewal(of: original, in: environment)
        let graceEnds = renewal["gracePeriodExpiresDate"].flatMap { $0.stringValue.flatMap(Double.init) } ?? 0
        let inRetry = renewal["isInBillingRetryPeriod"]?.boolValue ?? false
        // A prorated refund leaves the subscription standing.
        let status =
            latest["revocationDate"] != nil && latest["revocationType"]?.stringValue != "REFUND_PRORATED"
            ? 5
            : MockServerAPI.expires(latest) > now ? 1 : inRetry && graceEnds > now ? 4 : inRetry ? 3 : 2
        var info: [String: JSONValue] = [
            "originalTransactionId": .string(original), "productId": latest["productId"] ?? .null,
            "autoRenewProductId": latest["productId"] ?? .null, "autoRenewStatus": .number(status == 1 || status >= 3 && status != 5 ? 1 : 0),
            "environment": .string(environment == .production ? "Production" : "Sandbox"),
            "signedDate": .number(now.rounded()), "recentSubscriptionStartDate": latest["originalPurchaseDate"] ?? .null,
        ]
        info.merge(renewal) { _, new in new }
        return (latest, status, .object(info))
    }

    /// The id of subscription `original`'s latest transaction (the one expiring last): what a
    /// refund of the current period is about.
    public func latestTransactionID(of original: String, in environment: AppStoreEnvironment) -> String? {
        latestTransaction(of: original, in: environment)?["transactionId"]?.stringValue
    }

    /// Subscription `original`'s latest transaction (the one expiring last), as recorded.
    public func latestTransaction(of original: String, in environment: AppStoreEnvironment) -> JSONValue? {
        subscription(original, among: history(of: original, in: environment) ?? [], in: environment)?.latest
    }

    /// Changes a recorded transaction in place (a refund, a revocation); nil when unknown.
    @discardableResult
    public func update(
        transaction id: String, in environment: AppStoreEnvironment, _ change: (inout [String: JSONValue]) -> Void
    ) -> JSONValue? {
        storage.withLock { storage in
            guard let entry = storage.transactions[environment]?[id] else { return nil }
            var payload = entry.payload.objectValue ?? [:]
            change(&payload)
            storage.transactions[environment]?[id] = (entry.customer, .object(payload))
            return .object(payload)
        }
    }

    func renewal(of original: String, in environment: AppStoreEnvironment) -> [String: JSONValue] {
        storage.withLock { $0.renewals[environment]?[original] ?? [:] }
    }

    // MARK: Synthesized purchases (benchmarks)

    /// Whether production answers a numeric transaction id it has never recorded with a synthesized
    /// monthly subscription of the caller's app (bought a day ago, renewing in 29 days), as if every
    /// id were a real purchase: a load test can then send millions of distinct ids without
    /// registering each. Off by default: tests want unknown ids to be 4040010.
    public var synthesizesUnknownTransactions: Bool {
        get { storage.withLock { $0.synthesizes } }
        set { storage.withLock { $0.synthesizes = newValue } }
    }

    /// The history of `id` in `environment`: recorded, or synthesized when that is on.
    func history(of id: String, in environment: AppStoreEnvironment, bundleID: String) -> [JSONValue]? {
        if let recorded = history(of: id, in: environment) { return recorded }
        guard environment == .production, synthesizesUnknownTransactions, !id.isEmpty, id.utf8.allSatisfy({ (48...57).contains($0) }) else {
            return nil
        }
        return [Self.synthesizedTransaction(id: id, bundleID: bundleID, at: now())]
    }

    /// The purchase production synthesizes for an unknown `id` of `bundleID` (a monthly
    /// subscription bought a day before `date`, renewing in 29 days): what a load test's devices
    /// hold signed, and what Apple's answers then say about it.
    public static func synthesizedTransaction(id: String, bundleID: String, at date: Date) -> JSONValue {
        let now = (date.timeIntervalSince1970 * 1000).rounded()
        return .object([
            "transactionId": .string(id), "originalTransactionId": .string(id), "webOrderLineItemId": .string(id),
            "bundleId": .string(bundleID), "productId": .string("\(bundleID).monthly"),
            "subscriptionGroupIdentifier": .string("group-\(bundleID)"), "purchaseDate": .number(now - 86_400_000),
            "originalPurchaseDate": .number(now - 86_400_000), "expiresDate": .number(now + 29 * 86_400_000), "quantity": .number(1),
            "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
            "transactionReason": .string("PURCHASE"), "environment": .string("Production"), "storefront": .string("USA"),
            "storefrontId": .string("143441"),
        ])
    }

    /// The transaction `id`: recorded, or synthesized when that is on. Get Transaction Info must
    /// know every id the history knows: a worker asks it for a customer it has seen (a replayed
    /// job after a crash does), and a 4040010 there would store the purchase as invalid.
    func transaction(_ id: String, in environment: AppStoreEnvironment, bundleID: String) -> JSONValue? {
        transaction(id, in: environment) ?? history(of: id, in: environment, bundleID: bundleID)?.first { $0["transactionId"]?.stringValue == id }
    }

    // MARK: Keys, releases, rules, calls

    /// Accepts JWTs signed by `publicKey` under `keyID` for `bundleID`.
    public func addKey(issuerID: String, keyID: String, bundleID: String, publicKey: PublicKey) {
        storage.withLock { $0.keys[keyID] = Key(issuerID: issuerID, bundleID: bundleID, publicKey: publicKey) }
    }

    /// Accepts JWTs signed with `key` (an app's In-App Purchase key) for `bundleID`, as App Store
    /// Connect does once it issued the key.
    public func addKey(_ key: ServerAPIKey, bundleID: String) throws {
        addKey(issuerID: key.issuerID, keyID: key.keyID, bundleID: bundleID, publicKey: try PrivateKey(pem: key.privateKeyPEM).publicKey)
    }

    func key(_ keyID: String) -> Key? { storage.withLock { $0.keys[keyID] } }

    /// Whether production answers 401 for `bundleID` (an app with no live release, as Apple does).
    public func setUnreleased(_ unreleased: Bool, bundleID: String) {
        storage.withLock { storage in
            if unreleased { storage.unreleased.insert(bundleID) } else { storage.unreleased.remove(bundleID) }
        }
    }

    func isUnreleased(_ bundleID: String) -> Bool { storage.withLock { $0.unreleased.contains(bundleID) } }

    /// Adds a scripted rule.
    public func addRule(_ rule: Rule) { storage.withLock { $0.rules.append(rule) } }

    /// Removes every rule.
    public func clearRules() { storage.withLock { $0.rules.removeAll() } }

    /// Makes the whole Server API answer 503 while the mock's clock is in `outage` (from its
    /// start, until before its end): Apple down for a while. Nil ends it.
    public func setOutage(_ outage: DateInterval?) { storage.withLock { $0.outage = outage } }

    /// Whether the mock's clock is in the outage: every Server API call is answered 503.
    public var isDown: Bool {
        let now = now()
        guard let outage = storage.withLock({ $0.outage }) else { return false }
        return outage.start <= now && now < outage.end
    }

    /// The outage's answer, while the mock's clock is in one.
    func outageRule() -> Rule? { isDown ? Rule(httpStatus: 503) : nil }

    /// Takes one use of the first rule matching `path`; during an outage, its 503 instead.
    func takeRule(path: String) -> Rule? {
        if let down = outageRule() { return down }
        return storage.withLock { storage in
            guard let index = storage.rules.firstIndex(where: { $0.pathPrefix.map { path.hasPrefix($0) } ?? true }) else { return nil }
            let rule = storage.rules[index]
            storage.rules[index].count -= 1
            if storage.rules[index].count <= 0 { storage.rules.remove(at: index) }
            return rule
        }
    }

    func count(_ key: String) { storage.withLock { $0.calls[key, default: 0] += 1 } }

    func accepted(token: String) {
        storage.withLock { storage in
            guard !storage.acceptedTokens.contains(token) else { return }
            storage.acceptedTokens.append(token)
            if storage.acceptedTokens.count > 64 { storage.acceptedTokens.removeFirst() }
        }
    }

    /// The last distinct bearer JWTs the mock accepted (at most 64): what a test looks for in logs.
    public var acceptedTokens: [String] { storage.withLock { $0.acceptedTokens } }

    /// Calls answered so far, by `"<environment> <operation>"` (e.g. `production history`), and
    /// `"<environment> all"`.
    public func calls(_ key: String) -> Int { storage.withLock { $0.calls[key] ?? 0 } }

    /// Records that a call about transaction `id` began reading the ledger at `at` (the mock's
    /// clock) and was answered 200: the subscription it belongs to was asked about then.
    func answered(about id: String, in environment: AppStoreEnvironment, at: Date) {
        guard let original = originalTransactionID(of: id, in: environment) else { return }
        storage.withLock { $0.answered[environment, default: [:]][original, default: []].append(at) }
    }

    /// The original transaction id of the subscription (or purchase) transaction `id` belongs to.
    public func originalTransactionID(of id: String, in environment: AppStoreEnvironment) -> String? {
        guard let transaction = transaction(id, in: environment) else { return nil }
        return transaction["originalTransactionId"]?.stringValue ?? id
    }

    /// The first Server API answer about subscription `original` whose reading of the ledger began
    /// after `date` (the mock's clock): when a deployment that was not notified could first have
    /// learnt of a change made at `date`. Nil: not asked since.
    public func firstAnswer(about original: String, in environment: AppStoreEnvironment, after date: Date) -> Date? {
        storage.withLock { $0.answered[environment]?[original]?.first { $0 > date } }
    }

    // MARK: verifyReceipt's lifecycle

    /// How `verifyReceipt` answers about itself from now on.
    public func setVerifyReceiptLifecycle(_ lifecycle: VerifyReceiptLifecycle) { storage.withLock { $0.lifecycle = lifecycle } }

    var verifyReceiptLifecycle: VerifyReceiptLifecycle { storage.withLock { $0.lifecycle } }
}
