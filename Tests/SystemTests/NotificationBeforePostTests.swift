import Foundation
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Apple's notification of a new subscription arriving before the device posts it, as it often
/// does (the conformance suite's `offer_code` scenario, under Server API errors that held the
/// post back): the owner's backend must still hear that the subscription started.
@Suite("A new subscription's notification before the device's post", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct NotificationBeforePostTests {
    @Test("OFFER_REDEEMED stored before anyone claimed the subscription: the post that claims it states subscription.started for its user, once")
    func startedForTheClaimingUser() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try NotificationTests().subscribe(system)
        let (jws, payload) = try system.signedTransaction(
            product: "com.example.monthly", days: 30, fields: ["offerType": .number(3), "offerIdentifier": .string("code-1")])
        let original = try #require(payload["originalTransactionId"]?.stringValue)
        try system.mock.state.notifications.event(type: "OFFER_REDEEMED", subtype: "INITIAL_BUY", transactionID: original, environment: .sandbox)
        // Stored without an owner: the subscription is known, nobody's yet.
        #expect(
            try await eventually(timeout: .seconds(30)) {
                let connection = try system.postgres()
                defer { connection.close() }
                let rows = try connection.query(
                    "SELECT user_identifier FROM subscriptions WHERE app_id = \(system.app.id) AND original_transaction_id = \(original)"
                ).rows
                return rows.count == 1 && rows[0].string("user_identifier") == nil
            })
        let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string("first-post")]).encodedText
        #expect(try await system.post(body, path: "/client/transactions").0 == 200)
        let started = try await MoneyTests().events(system, user: "first-post", type: "subscription.started", count: 1)
        #expect(started?.count == 1, "the owner's backend never heard the subscription started")
        // Told once: the validation's own events come with it, and nothing states it again.
        let validated = try await MoneyTests().events(system, user: "first-post", type: "receipt.validated", count: 1)
        #expect(validated?.count == 1)
        #expect(
            try await system.get(path: "/client/events?user_identifier=first-post&type=subscription.started").1?["events"]?.arrayValue?.count == 1)
    }
}
