import Foundation
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The refund defence end to end: the mock App Store signs a `CONSUMPTION_REQUEST` and posts it to
/// the app's notification URL → the worker stores it and turns it into its answer's job → Send
/// Consumption Information v2 reaches the mock once, with the app's policy's values → the answer
/// is recorded, audited and stated as one `refund.consumption_sent` event.
@Suite("Refund defence: CONSUMPTION_REQUEST answered", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RefundDefenceSystemTests {
    let notifications = NotificationTests()

    /// A purchase by `user`, the app's policy, the user's consent and use as the app posted them.
    func prepare(_ system: TestSystem, user: String, policy: ConsumptionPolicy) async throws -> String {
        _ = try notifications.subscribe(system)
        let id = try await notifications.purchase(system, user: user)
        let connection = try system.postgres()
        defer { connection.close() }
        let admin = AppAdmin(connection: connection)
        try admin.setConsumptionPolicy(appID: system.app.id, policy: policy)
        try admin.setCustomerConsumption(
            CustomerConsumption(consented: true, consumptionPercentage: 25_000, sampleContentProvided: true, playTimeSeconds: 5400),
            appID: system.app.id, userIdentifier: user)
        return id
    }

    func requests(_ system: TestSystem, _ id: String) -> [MockConsumptionRequest] {
        system.mock.state.serverAPI.support.consumptionRequests.filter { $0.transactionID == id }
    }

    func sentEvents(_ system: TestSystem, user: String) async throws -> [JSONValue] {
        try await system.get(path: "/client/events?type=refund.consumption_sent&user_identifier=\(user)").1?["events"]?.arrayValue ?? []
    }

    /// The request has been stored and its answer's job settled: nothing more will be sent.
    func settled(_ system: TestSystem) async throws -> Bool {
        try await eventually {
            let connection = try system.postgres()
            defer { connection.close() }
            let stored =
                try connection.query(
                    "SELECT 1 AS found FROM notifications WHERE app_id = \(system.app.id) AND notification_type = 'CONSUMPTION_REQUEST'"
                ).rows.count == 1
            return try stored && system.queuesIdle([.notification])
        }
    }

    @Test("prefer_decline: one PUT with the policy's values, one event, one audit line; a second copy of the request sends nothing more")
    func answeredOnce() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let id = try await prepare(system, user: "defended", policy: .preferDecline)
        try system.mock.state.notifications.event(
            type: "CONSUMPTION_REQUEST", transactionID: id, environment: .sandbox, delivery: .init(copies: 2))
        #expect(try await eventually { requests(system, id).count == 1 })
        let sent = try #require(requests(system, id).first)
        #expect(sent.environment == .sandbox)
        #expect(
            sent.body
                == .object([
                    "customerConsented": .bool(true), "deliveryStatus": .string("DELIVERED"), "sampleContentProvided": .bool(true),
                    "consumptionPercentage": .number(25_000), "refundPreference": .string("DECLINE"),
                ]))
        #expect(try await eventually { try await sentEvents(system, user: "defended").count == 1 })
        #expect(try await settled(system))
        #expect(requests(system, id).count == 1)
        let event = try #require(try await sentEvents(system, user: "defended").first)
        #expect(event["data"]?["policy"]?.stringValue == "prefer_decline")
        #expect(event["data"]?["play_time_seconds"]?.intValue == 5400)
        #expect(event["transaction_id"]?.stringValue == id)
        let connection = try system.postgres()
        defer { connection.close() }
        let audit = try await connection.query(
            "SELECT target FROM audit_log WHERE app_id = \(system.app.id) AND action = 'refund.consumption_sent'"
        ).rows
        #expect(audit.count == 1)
        #expect(audit.first?.string("target")?.contains("DECLINE") == true)
        #expect(system.metric("receiptq_consumption_answers_total", ["outcome": "sent"]) == 1)
    }

    @Test("A 5xx from Apple is retried: the answer gets through once")
    func retriedAfterServerError() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let id = try await prepare(system, user: "retried", policy: .neutral)
        system.mock.state.serverAPI.addRule(.init(count: 2, pathPrefix: "/inApps/v2/transactions/consumption/", httpStatus: 503))
        try system.mock.state.notifications.event(type: "CONSUMPTION_REQUEST", transactionID: id, environment: .sandbox)
        #expect(try await eventually { try await sentEvents(system, user: "retried").count == 1 })
        #expect(try await settled(system))
        let sent = requests(system, id)
        #expect(sent.count == 1)
        // Neutral: the facts without a preference.
        #expect(sent.first?.body["refundPreference"] == nil && sent.first?.body["deliveryStatus"]?.stringValue == "DELIVERED")
        #expect(system.mock.state.serverAPI.calls("sandbox consumption") == 3)
    }

    @Test("Policy off: the request is stored, nothing is sent, no event")
    func offSendsNothing() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let id = try await prepare(system, user: "undefended", policy: .off)
        try system.mock.state.notifications.event(type: "CONSUMPTION_REQUEST", transactionID: id, environment: .sandbox)
        #expect(try await settled(system))
        #expect(requests(system, id).isEmpty)
        #expect(try await sentEvents(system, user: "undefended").isEmpty)
        #expect(system.metric("receiptq_consumption_answers_total", ["outcome": "skipped"]) == 1)
    }
}
