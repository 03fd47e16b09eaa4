import Foundation
import Libpq
import OpenSSL
import ReceiptCore
import ReceiptTesting
import ServerTesting
import Testing

@testable import PostgresStore

extension WebhookTests {
    @Test("The pause rule on a moved clock: a day of failures without one success pauses the endpoint; a success or a resume restarts the day")
    func pauseAfterADay() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let connection = try system.postgres()
        defer { connection.close() }
        let admin = WebhookAdmin(connection: connection, secrets: try SecretBox(key: TestSystem.secretsKey))
        let (endpoint, _) = try admin.add(appID: system.app.id, url: "https://hooks.example.com/rq", audit: .test("webhook.add"))
        let outbox = PostgresWebhookOutbox(connection: connection, apps: [system.app.id])
        let start = Date(timeIntervalSince1970: 1_900_000_000)
        var delivery: Int64 = 0
        /// One attempt's outcome `hours` after `start`, as a worker's committer records it.
        func attempt(_ hours: Double, delivered: Bool = false) throws {
            delivery += 1
            let target = WebhookTarget(deliveryID: -delivery, endpointID: endpoint, eventID: UUID(), eventType: "subscription.renewed")
            try WebhookRows.record(
                [
                    DeliveryOutcome(
                        target: target, status: delivered ? .delivered : .retrying, attempts: 1, httpStatus: delivered ? 200 : 503,
                        errorCode: delivered ? nil : .http(503), at: start.addingTimeInterval(hours * 3600))
                ], on: connection)
        }
        func state() throws -> (failingSince: Date?, pausedAt: Date?) {
            let summary = try #require(try admin.list(appID: system.app.id).first { $0.id == endpoint })
            return (summary.failingSince, summary.pausedAt)
        }

        try attempt(0)
        #expect(try state().failingSince == start && state().pausedAt == nil)
        try attempt(23.9)
        #expect(try state().pausedAt == nil, "23.9 hours of failures: still trying")
        try attempt(23.95, delivered: true)
        #expect(try state().failingSince == nil, "one success ends the run of failures")
        try attempt(24)
        try attempt(47.9)
        #expect(try state().pausedAt == nil && state().failingSince == start.addingTimeInterval(24 * 3600))
        try attempt(48)
        #expect(try state().pausedAt == start.addingTimeInterval(48 * 3600), "24 hours after the new run began")
        #expect(try outbox.pausedEndpoints() == 1)
        // The operator sees it on the overview, whose other cards come from Redis.
        let browser = DashboardPagesTests.Browser(system)
        #expect(try await browser.logIn().location == "/admin")
        let overview = try await browser.get("/admin")
        #expect(overview.text.contains("webhooks-paused-banner") && overview.text.contains("queue-webhook"))
        try attempt(49, delivered: true)
        #expect(try state().pausedAt != nil, "a late success of an attempt already in flight does not resume it: an operator does")
        try admin.setPaused(id: endpoint, false, audit: .test("webhook.resume"))
        #expect(try state().pausedAt == nil && state().failingSince == nil && outbox.pausedEndpoints() == 0)
        try attempt(50)
        try attempt(73.9)
        #expect(try state().pausedAt == nil, "resuming gives the endpoint a new day")
        try attempt(74)
        #expect(try state().pausedAt != nil)
    }
}
