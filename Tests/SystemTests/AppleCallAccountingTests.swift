import Foundation
import Hiredis
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Telemetry
import Testing

/// What an app's Server API calls are spent on, as operators see it (Prometheus, the dashboard's
/// Apple calls page), and the hourly budget deferring the work nobody waits on.
@Suite(
    "Apple calls: accounted per app, endpoint and purpose; deferrable work waits for the next hour", .blockingWork,
    .enabled(if: TestEnvironment.integrationEnabled))
struct AppleCallAccountingTests {
    @Test(
        "With no hourly share for deferrable work, an import waits in the retry set for the next hour while a live purchase is validated; both are accounted"
    )
    func importWaitsForTheNextHour() async throws {
        let system = try await TestSystem.start(environment: ["SERVER_API_DEFERRABLE_PERCENT": "0"])
        defer { Task { await system.stop() } }
        let asked = Date()
        let live = try system.signedTransaction()
        let (liveStatus, _) = try await system.post(#"{"signed_transaction":"\#(live.jws)"}"#, path: "/client/transactions")
        #expect(liveStatus == 200 || liveStatus == 206)
        let imported = try (0..<2).map { _ in try system.signedTransaction() }
        let batch = "[" + imported.map { #"{"signed_transaction":"\#($0.jws)"}"# }.joined(separator: ",") + "]"
        let (importStatus, answer) = try await system.post(batch, path: "/client/transactions/batch")
        #expect(importStatus == 200 && answer?["counts"]?["accepted"]?.intValue == 2)

        let pg = try system.postgres()
        defer { pg.close() }
        let liveID = try #require(live.payload["transactionId"]?.stringValue)
        #expect(
            try await eventually(timeout: .seconds(30)) {
                try await pg.query("SELECT status FROM receipts WHERE transaction_id = \(liveID)").rows.first?.string("status") == "valid"
            })
        // The import's jobs wait in the retry set until the next hour: neither failed nor lost.
        let redis = try system.redis()
        defer { redis.close() }
        let nextHour = HourlyCallBudget.nextHour(after: asked).timeIntervalSince1970
        let waiting = try await eventually(timeout: .seconds(30)) {
            let scores = try redis.send(["ZRANGE", system.configuration.keys.retry, "0", "-1", "WITHSCORES"]).array ?? []
            let dues = stride(from: 1, to: scores.count, by: 2).compactMap { scores[$0].string.flatMap(Double.init) }
            // Scores are the due times in milliseconds.
            return dues.count == 2 && dues.allSatisfy { $0 / 1000 >= nextHour }
        }
        #expect(waiting, "both imported jobs wait in the retry set until \(Date(timeIntervalSince1970: nextHour))")
        let importedIDs = imported.compactMap { $0.payload["transactionId"]?.stringValue }
        for id in importedIDs {
            let settled = try await pg.query("SELECT count(*) AS n FROM receipts WHERE transaction_id = \(id) AND status <> 'pending'").rows
            #expect(settled.first?.int("n") == 0, "imported \(id) is not settled before its hour")
        }

        // Prometheus: the live purchase's calls counted as validation, none as import (none was sent).
        let exposition = String(decoding: system.metrics.exposition(), as: UTF8.self).split(separator: "\n")
        let calls = exposition.filter { $0.hasPrefix("receiptq_server_api_calls_total{") }
        #expect(calls.contains { $0.contains(#"app="\#(system.app.bundleID)""#) && $0.contains(#"purpose="validation""#) }, "\(calls)")
        #expect(!calls.contains { $0.contains(#"purpose="import""#) }, "\(calls)")

        // The dashboard's Apple calls page shows the app's hour, per endpoint, with what it was spent on.
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let page = try await browser.get("/admin/apple-calls")
        #expect(page.status == 200)
        #expect(page.text.contains(system.app.bundleID))
        #expect(page.text.contains("validation "))
        #expect(page.text.contains("class=\"budget-bar"))
        #expect(!page.text.contains("import "))
    }
}
