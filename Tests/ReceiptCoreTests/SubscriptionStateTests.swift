import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Subscription state from verifyReceipt answers")
struct SubscriptionStateTests {
    // MARK: Hand-built answers

    static let day: TimeInterval = 86_400
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// One transaction in Apple's JSON shape (every value a string, dates as `*_ms`).
    static func transaction(
        _ id: String, original: String = "1000", product: String = "monthly", purchased: TimeInterval, expires: TimeInterval,
        extra: [String: String] = [:]
    ) -> JSONValue {
        func ms(_ offset: TimeInterval) -> JSONValue { .string(String(Int64((now.timeIntervalSince1970 + offset) * 1000))) }
        var object: [String: JSONValue] = [
            "transaction_id": .string(id), "original_transaction_id": .string(original), "product_id": .string(product),
            "quantity": .string("1"), "purchase_date_ms": ms(purchased), "expires_date_ms": ms(expires),
            "is_trial_period": .string("false"), "is_in_intro_offer_period": .string("false"),
        ]
        for (key, value) in extra { object[key] = .string(value) }
        return .object(object)
    }

    static func response(
        status: Int = 0, latest: [JSONValue], inApp: [JSONValue] = [], pending: [[String: String]] = []
    ) -> VerifyReceiptResponse {
        VerifyReceiptResponse(
            json: .object([
                "status": .number(Double(status)), "environment": .string("Production"),
                "receipt": .object(["bundle_id": .string("com.example"), "in_app": .array(inApp)]),
                "latest_receipt_info": .array(latest),
                "pending_renewal_info": .array(pending.map { .object($0.mapValues(JSONValue.string)) }),
            ]))
    }

    static func ms(_ offset: TimeInterval) -> String { String(Int64((now.timeIntervalSince1970 + offset) * 1000)) }

    /// Three monthly periods; the last one runs until `lastExpires` (relative to `now`).
    static func history(lastExpires: TimeInterval, lastExtra: [String: String] = [:]) -> [JSONValue] {
        [
            transaction("1000", purchased: lastExpires - 90 * day, expires: lastExpires - 60 * day),
            transaction("1001", purchased: lastExpires - 60 * day, expires: lastExpires - 30 * day),
            transaction("1002", purchased: lastExpires - 30 * day, expires: lastExpires, extra: lastExtra),
        ]
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var response: VerifyReceiptResponse
        var status: SubscriptionStatus
        var entitled: Bool
        var check: @Sendable (SubscriptionState) -> Bool = { _ in true }
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "active, auto-renewing",
            response: response(
                latest: history(lastExpires: 10 * day),
                pending: [["original_transaction_id": "1000", "auto_renew_status": "1", "auto_renew_product_id": "yearly"]]),
            status: .active, entitled: true,
            check: { $0.latestTransactionID == "1002" && $0.autoRenewStatus == true && $0.autoRenewProductID == "yearly" && $0.period == 30 * day }),
        Case(
            name: "active but auto-renew turned off: still entitled until expiry",
            response: response(latest: history(lastExpires: 1 * day), pending: [["original_transaction_id": "1000", "auto_renew_status": "0"]]),
            status: .active, entitled: true, check: { $0.autoRenewStatus == false && $0.expirationIntent == nil }),
        Case(
            name: "expired, customer cancelled (intent 1)",
            response: response(
                latest: history(lastExpires: -2 * day),
                pending: [["original_transaction_id": "1000", "auto_renew_status": "0", "expiration_intent": "1"]]),
            status: .expired, entitled: false, check: { $0.expirationIntent == 1 }),
        Case(
            name: "grace period: renewal failed, still entitled until the grace period ends",
            response: response(
                latest: history(lastExpires: -1 * day),
                pending: [
                    [
                        "original_transaction_id": "1000", "auto_renew_status": "1", "is_in_billing_retry_period": "1",
                        "grace_period_expires_date_ms": ms(5 * day),
                    ]
                ]),
            status: .grace, entitled: true, check: { $0.isInBillingRetry && $0.gracePeriodExpiresAt == now.addingTimeInterval(5 * day) }),
        Case(
            name: "billing retry after the grace period ended",
            response: response(
                latest: history(lastExpires: -20 * day),
                pending: [
                    [
                        "original_transaction_id": "1000", "is_in_billing_retry_period": "1", "expiration_intent": "2",
                        "grace_period_expires_date_ms": ms(-4 * day),
                    ]
                ]),
            status: .billingRetry, entitled: false, check: { $0.expirationIntent == 2 && $0.isInBillingRetry }),
        Case(
            name: "refund of the current period: revoked, treated as never purchased",
            response: response(
                latest: history(lastExpires: 20 * day, lastExtra: ["cancellation_date_ms": ms(-1 * day), "cancellation_reason": "1"])),
            status: .revoked, entitled: false, check: { $0.revokedAt == now.addingTimeInterval(-day) && $0.cancellationReason == 1 }),
        Case(
            name: "family sharing revoked",
            response: response(
                latest: history(lastExpires: 20 * day, lastExtra: ["in_app_ownership_type": "FAMILY_SHARED", "cancellation_date_ms": ms(-3600)])),
            status: .revoked, entitled: false, check: { $0.ownershipType == "FAMILY_SHARED" }),
        Case(
            name: "family shared and active",
            response: response(latest: history(lastExpires: 20 * day, lastExtra: ["in_app_ownership_type": "FAMILY_SHARED"])),
            status: .active, entitled: true, check: { $0.ownershipType == "FAMILY_SHARED" }),
        Case(
            name: "upgrade within the group: the new product's transaction is the latest",
            response: response(latest: [
                transaction(
                    "2000", original: "2000", product: "basic.yearly", purchased: -100 * day, expires: 265 * day,
                    extra: ["is_upgraded": "true", "cancellation_date_ms": ms(-10 * day)]),
                transaction("2001", original: "2000", product: "premium.monthly", purchased: -10 * day, expires: 20 * day),
            ]),
            status: .active, entitled: true, check: { $0.productID == "premium.monthly" && $0.latestTransactionID == "2001" }),
        Case(
            name: "upgraded away: the old subscription's last transaction says is_upgraded",
            response: response(latest: [
                transaction(
                    "3000", original: "3000", product: "basic.monthly", purchased: -5 * day, expires: 25 * day,
                    extra: ["is_upgraded": "true", "cancellation_date_ms": ms(-1 * day)])
            ]),
            status: .upgraded, entitled: false),
        Case(
            name: "trial period",
            response: response(latest: [
                transaction("4000", original: "4000", purchased: -1 * day, expires: 6 * day, extra: ["is_trial_period": "true"])
            ]),
            status: .active, entitled: true, check: { $0.isTrial && !$0.isIntro }),
        Case(
            name: "introductory offer",
            response: response(latest: [
                transaction("4100", original: "4100", purchased: -1 * day, expires: 6 * day, extra: ["is_in_intro_offer_period": "true"])
            ]),
            status: .active, entitled: true, check: { !$0.isTrial && $0.isIntro }),
        Case(
            name: "only in_app (no latest_receipt_info)",
            response: VerifyReceiptResponse(
                json: .object([
                    "status": .number(0),
                    "receipt": .object(["in_app": .array([transaction("5000", original: "5000", purchased: -1 * day, expires: 29 * day)])]),
                ])),
            status: .active, entitled: true),
        Case(
            name: "iOS 6 transaction receipt answered 21006: expired, renewal fields at the top level",
            response: VerifyReceiptResponse(
                json: .object([
                    "status": .number(21006),
                    "receipt": .object([
                        "transaction_id": .string("6000"), "original_transaction_id": .string("6000"), "product_id": .string("m"),
                        "purchase_date_ms": .string(ms(-40 * day)), "expires_date": .string(ms(-10 * day)),
                    ]),
                    "latest_expired_receipt_info": .object([
                        "transaction_id": .string("6001"), "original_transaction_id": .string("6000"), "product_id": .string("m"),
                        "purchase_date_ms": .string(ms(-40 * day)), "expires_date": .string(ms(-10 * day)),
                    ]),
                    "auto_renew_status": .string("0"), "expiration_intent": .string("1"),
                ])),
            status: .expired, entitled: false, check: { $0.expirationIntent == 1 && $0.autoRenewStatus == false && $0.latestTransactionID == "6001" }),
    ]

    @Test("State table", arguments: cases)
    func stateTable(_ testCase: Case) throws {
        let states = SubscriptionState.states(from: testCase.response, at: Self.now)
        let state = try #require(states.count == 1 ? states.first : nil, "expected exactly one subscription, got \(states.count)")
        #expect(state.status == testCase.status)
        #expect(state.isEntitled(at: Self.now) == testCase.entitled)
        #expect(testCase.check(state))
        #expect(state.observedAt == Self.now)
    }

    @Test("Apple's array order does not matter", arguments: cases)
    func orderIndependent(_ testCase: Case) throws {
        var rng = SeededGenerator(seed: 7)
        let reference = SubscriptionState.states(from: testCase.response, at: Self.now)
        var json = testCase.response.json.objectValue ?? [:]
        for _ in 0..<5 {
            if let latest = json["latest_receipt_info"]?.arrayValue { json["latest_receipt_info"] = .array(latest.shuffled(using: &rng)) }
            if let pending = json["pending_renewal_info"]?.arrayValue { json["pending_renewal_info"] = .array(pending.shuffled(using: &rng)) }
            #expect(SubscriptionState.states(from: VerifyReceiptResponse(json: .object(json)), at: Self.now) == reference)
        }
    }

    @Test("Errors and non-subscription purchases give no state")
    func noState() {
        #expect(SubscriptionState.states(from: Self.response(status: 21007, latest: Self.history(lastExpires: 10 * Self.day)), at: Self.now).isEmpty)
        #expect(SubscriptionState.states(from: Self.response(status: 21004, latest: Self.history(lastExpires: 10 * Self.day)), at: Self.now).isEmpty)
        let consumable = JSONValue.object([
            "transaction_id": .string("9"), "original_transaction_id": .string("9"), "product_id": .string("coins"), "purchase_date_ms": .string("1"),
        ])
        #expect(SubscriptionState.states(from: Self.response(latest: [], inApp: [consumable]), at: Self.now).isEmpty)
    }

    @Test("Grace ends: the same answer is billing retry once the grace date passes, expired when retry stops")
    func timeDecides() throws {
        let pending = ["original_transaction_id": "1000", "is_in_billing_retry_period": "1", "grace_period_expires_date_ms": Self.ms(5 * Self.day)]
        let answer = Self.response(latest: Self.history(lastExpires: -1 * Self.day), pending: [pending])
        #expect(SubscriptionState.states(from: answer, at: Self.now).first?.status == .grace)
        #expect(SubscriptionState.states(from: answer, at: Self.now.addingTimeInterval(6 * Self.day)).first?.status == .billingRetry)
        let stopped = Self.response(
            latest: Self.history(lastExpires: -1 * Self.day),
            pending: [["original_transaction_id": "1000", "is_in_billing_retry_period": "0", "expiration_intent": "2"]])
        let state = try #require(SubscriptionState.states(from: stopped, at: Self.now).first)
        #expect(state.status == .expired)
        #expect(state.expirationIntent == 2)
    }

    // MARK: Apple's own answers

    struct RealCase: Sendable, CustomTestStringConvertible {
        var file: String
        var at: Date
        /// original transaction id → (status, latest transaction id)
        var expected: [String: (SubscriptionStatus, String)]
        var testDescription: String { file }
    }

    static let realCases: [RealCase] = [
        RealCase(
            file: "imdhemy-verify_receipt_response.json", at: Date(timeIntervalSince1970: 1_700_000_000),
            expected: ["1000000723811158": (.expired, "1000000767477815")]),
        RealCase(
            file: "revenuecat-verifyReceiptSample1.json", at: Date(timeIntervalSince1970: 1_595_000_000),
            expected: ["1000000692878476": (.active, "1000000696553650")]),
        RealCase(
            file: "nov-autorenew_subscription_cancelled-ios6.json", at: Date(timeIntervalSince1970: 1_350_000_000),
            expected: ["1000000057005439": (.revoked, "1000000052076747")]),
        RealCase(
            file: "nov-autorenew_subscription-ios6-status0.json", at: Date(timeIntervalSince1970: 1_350_000_000),
            expected: ["1000000057005439": (.active, "1000000052076747")]),
        RealCase(
            file: "nov-autorenew_subscription_multiple-ios7.json", at: Date(timeIntervalSince1970: 1_429_358_000),
            expected: ["1000000152220616": (.active, "1000000152220953")]),
        RealCase(
            file: "monza-response.json", at: Date(timeIntervalSince1970: 1_700_000_000),
            // 1000000218147501 is listed twice; the copy seen first has no expiry, so it is not a subscription.
            expected: ["1000000218147500": (.expired, "1000000218147651")]),
        RealCase(file: "swifty-21007-edited.json", at: Date(timeIntervalSince1970: 1_555_000_000), expected: [:]),
        RealCase(file: "nov-valid-ios6-status0.json", at: Date(timeIntervalSince1970: 1_555_000_000), expected: [:]),
    ]

    @Test("Real verifyReceipt answers", arguments: realCases)
    func real(_ testCase: RealCase) throws {
        guard let root = TestEnvironment.appStoreTestData else {
            print("skipped: ../shared/testdata/appstore is absent")
            return
        }
        let data = try Data(contentsOf: root.appendingPathComponent("responses/\(testCase.file)"))
        let response = try #require(VerifyReceiptResponse(body: [UInt8](data)))
        let states = SubscriptionState.states(from: response, at: testCase.at)
        #expect(
            Dictionary(uniqueKeysWithValues: states.map { ($0.originalTransactionID, "\($0.status.rawValue) \($0.latestTransactionID)") })
                == testCase.expected.mapValues { "\($0.0.rawValue) \($0.1)" })
    }

    @Test("The imdhemy answer: renewal info matched by original transaction id, not by product")
    func imdhemyRenewalInfo() throws {
        guard let root = TestEnvironment.appStoreTestData else { return }
        let data = try Data(contentsOf: root.appendingPathComponent("responses/imdhemy-verify_receipt_response.json"))
        let response = try #require(VerifyReceiptResponse(body: [UInt8](data)))
        let state = try #require(SubscriptionState.states(from: response, at: Self.now).first)
        #expect(state.autoRenewStatus == false)
        #expect(state.autoRenewProductID == "one_month_subscription")
        #expect(state.expirationIntent == 1)
        #expect(state.ownershipType == "PURCHASED")
        #expect(state.expiresAt == Date(timeIntervalSince1970: 1_611_147_900))
    }

    @Test("Every real answer: the latest transaction is the one expiring last", arguments: AppleResponseFiles.names)
    func latestIsLastPurchased(file: String) throws {
        guard let root = TestEnvironment.appStoreTestData else { return }
        let data = try Data(contentsOf: root.appendingPathComponent("responses/\(file)"))
        guard let response = VerifyReceiptResponse(body: [UInt8](data)) else { return }
        let purchases = response.transactions.compactMap(InAppPurchase.init(appleJSON:)).filter { $0.expiresDate != nil }
        for state in SubscriptionState.states(from: response, at: Self.now) {
            let group = purchases.filter { $0.originalTransactionID == state.originalTransactionID }
            #expect(state.expiresAt == group.compactMap(\.expiresDate).max())
            #expect(group.contains { $0.transactionID == state.latestTransactionID })
        }
    }
}

enum AppleResponseFiles {
    static var names: [String] {
        guard let dir = TestEnvironment.appStoreTestData else { return [] }
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("responses").path)) ?? [])
            .filter { $0.hasSuffix(".json") }.sorted()
    }
}
