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
        // The operator sets the policy through the admin API (role admin, audited).
        let path = "/admin/api/apps/\(system.app.id.canonical)/consumption-policy"
        let set = try await AdminAPITests().send(system, "PUT", path, body: #"{"policy": "\#(policy.rawValue)"}"#)
        #expect(set.status == 200, "\(String(decoding: set.body, as: UTF8.self))")
        #expect(try await AdminAPITests().send(system, "GET", path).json?["policy"]?.stringValue == policy.rawValue)
        // The app's backend posts the customer's consent and use through its door.
        let statement = #"{"consented": true, "consumption_percentage": 25000, "sample_content_provided": true, "play_time_seconds": 5400}"#
        let (status, stored) = try await system.post(statement, path: "/client/users/\(user)/consumption", method: "PUT")
        #expect(status == 200)
        #expect(stored?["consumption_percentage"]?.intValue == 25_000 && stored?["delivery_status"] == .null)
        return id
    }

    func requests(_ system: TestSystem, _ id: String) -> [MockConsumptionRequest] {
        system.mock.state.serverAPI.support.consumptionRequests.filter { $0.transactionID == id }
    }

    func sentEvents(_ system: TestSystem, user: String) async throws -> [JSONValue] {
        try await system.get(path: "/client/events?type=refund.consumption_sent&user_identifier=\(user)").1?["events"]?.arrayValue ?? []
    }

    /// `count` answer jobs settled, counted by the workers: nothing more will be sent.
    func settled(_ system: TestSystem, answerJobs count: Double) async throws -> Bool {
        try await eventually {
            ["sent", "skipped", "dead"].reduce(0) { $0 + (system.metric("receiptq_consumption_answers_total", ["outcome": $1]) ?? 0) } >= count
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
        // The door queues one job per notification UUID: the copy became no second answer job
        // (copies that do reach the workers are held to one send by the claim: RefundDefenceEngineTests).
        #expect(try await settled(system, answerJobs: 1))
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
        // The customer view shows the answer: its event and its audit line with the values sent.
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let page = try await browser.get("/admin/customers?by=user&q=defended")
        #expect(page.status == 200)
        #expect(page.text.contains("refund.consumption_sent") && page.text.contains("DECLINE"))
    }

    @Test("A 5xx from Apple is retried: the answer gets through once")
    func retriedAfterServerError() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let id = try await prepare(system, user: "retried", policy: .neutral)
        system.mock.state.serverAPI.addRule(.init(count: 2, pathPrefix: "/inApps/v2/transactions/consumption/", httpStatus: 503))
        try system.mock.state.notifications.event(type: "CONSUMPTION_REQUEST", transactionID: id, environment: .sandbox)
        #expect(try await eventually { try await sentEvents(system, user: "retried").count == 1 })
        #expect(try await settled(system, answerJobs: 1))
        let sent = requests(system, id)
        #expect(sent.count == 1)
        // Neutral: the facts without a preference.
        #expect(sent.first?.body["refundPreference"] == nil && sent.first?.body["deliveryStatus"]?.stringValue == "DELIVERED")
        #expect(system.mock.state.serverAPI.calls("sandbox consumption") == 3)
    }

    @Test("The consumption door refuses bad fields with 422 naming them, an unknown member included")
    func doorRefusesBadFields() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let body = #"{"consumption_percentage": 100001, "delivery_status": "LOST", "play_time_seconds": -1, "mood": "angry"}"#
        let (status, answer) = try await system.post(body, path: "/client/users/someone/consumption", method: "PUT")
        #expect(status == 422)
        let fields = Set(answer?["errors"]?.arrayValue?.compactMap { $0["field"]?.stringValue } ?? [])
        #expect(fields == ["consented", "consumption_percentage", "delivery_status", "play_time_seconds", "mood"])
    }

    @Test("The admin API refuses a policy it does not know (422) and an app that does not exist (404); a change is audited")
    func policyThroughTheAdminAPI() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let admin = AdminAPITests()
        let path = "/admin/api/apps/\(system.app.id.canonical)/consumption-policy"
        #expect(try await admin.send(system, "PUT", path, body: #"{"policy": "always_win"}"#).status == 422)
        #expect(try await admin.send(system, "PUT", path, body: #"{"policy": "neutral", "why": "x"}"#).status == 422)
        #expect(
            try await admin.send(system, "PUT", "/admin/api/apps/\(UUID().canonical)/consumption-policy", body: #"{"policy": "off"}"#).status == 404)
        #expect(try await admin.send(system, "PUT", path, body: #"{"policy": "prefer_grant"}"#).status == 200)
        let connection = try system.postgres()
        defer { connection.close() }
        let audit = try await connection.query(
            "SELECT target, outcome FROM audit_log WHERE app_id = \(system.app.id) AND action = 'app.consumption_policy'"
        ).rows
        #expect(audit.map { $0.string("target") } == ["consumption policy prefer_grant"])
        #expect(audit.first?.string("outcome") == "done")
    }

    @Test("Policy off: the request is stored, nothing is sent, no event")
    func offSendsNothing() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let id = try await prepare(system, user: "undefended", policy: .off)
        try system.mock.state.notifications.event(type: "CONSUMPTION_REQUEST", transactionID: id, environment: .sandbox)
        #expect(try await settled(system, answerJobs: 1))
        #expect(requests(system, id).isEmpty)
        #expect(try await sentEvents(system, user: "undefended").isEmpty)
        #expect(system.metric("receiptq_consumption_answers_total", ["outcome": "skipped"]) == 1)
    }
}
