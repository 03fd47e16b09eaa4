import DevTools
import Foundation
import Hiredis
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import RedisJobQueue
import ServerTesting
import SystemTesting
import Telemetry
import Testing

/// A delivery job Redis lost after the dispatcher's commit (a failover without replica
/// acknowledgement, a restart that lost its last writes): the dispatcher finds its marker gone
/// and queues it again; a job Redis still holds is left alone.
extension WebhookTests {
    @Test(
        "A queued delivery whose job and marker Redis lost is queued again after WEBHOOK_REQUEUE_AFTER_SECONDS and delivered once; one Redis still holds is not sent twice"
    )
    func lostDeliveryQueuedAgain() async throws {
        // Retries far apart (12 s to 2 min): the jobs wait in the retry set while the test works.
        let system = try await TestSystem.start(environment: ["WEBHOOK_REQUEUE_AFTER_SECONDS": "2", "RETRY_BASE_MS": "120000"])
        defer { Task { await system.stop() } }
        let (receiver, _, task) = try await receiver(system)
        defer { task.cancel() }
        receiver.behave(.init(down: true))
        // Two users: two first deliveries queued at once (each user's later events wait behind them).
        for user in ["requeue-lost", "requeue-kept"] {
            let (receipt, _) = try system.forgeReceipt()
            #expect(try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"\#(user)"}"#).0 == 200)
        }
        let redis = try system.redis()
        defer { redis.close() }
        let keys = system.configuration.keys
        /// The webhook jobs waiting in the retry set: the member, and the delivery it sends.
        func retrying() throws -> [(member: [UInt8], delivery: Int64)] {
            try (redis.send(["ZRANGE", keys.retry, "0", "-1"]).array ?? []).compactMap { value in
                guard case .bulk(let bytes) = value, let job = try? JobEnvelope.decode(bytes), let target = job.payload.delivery?.target else {
                    return nil
                }
                return (bytes, target.deliveryID)
            }
        }
        let failedOnce = try await eventually(timeout: .seconds(60)) { try retrying().count == 2 }
        try #require(failedOnce, "both first deliveries failed once: \((try? deliveryRows(system)) ?? [])")
        let waiting = try retrying()
        let (lost, kept) = (waiting[0], waiting[1])

        // Redis loses one job and its marker; the receiver is back.
        receiver.behave(.init())
        #expect(try redis.send(bytes: [Array("ZREM".utf8), Array(keys.retry.utf8), lost.member]).int == 1)
        #expect(try redis.send(["DEL", keys.webhookMarker(deliveryID: lost.delivery)]).int == 1)
        let eventOf: (Int64) throws -> String? = { delivery in
            let pg = try system.postgres()
            defer { pg.close() }
            return try pg.query("SELECT event_id FROM webhook_deliveries WHERE id = \(delivery)").rows.first?.uuid("event_id")?.canonical
        }
        let lostEvent = try #require(try eventOf(lost.delivery))
        let keptEvent = try #require(try eventOf(kept.delivery))
        let resent = try await eventually(timeout: .seconds(30)) {
            receiver.deliveries.contains { $0.eventID == lostEvent && $0.status == 200 }
        }
        #expect(resent, "the lost delivery sent again: \((try? deliveryRows(system)) ?? [])")
        let metrics = String(decoding: system.metrics.exposition(), as: UTF8.self)
        #expect(
            metrics.contains("receiptq_webhook_deliveries_requeued_total 1\n"), "\(metrics.split(separator: "\n").filter { $0.contains("requeued") })"
        )

        // The kept one was looked at too (queued longer than 2 s) and left where it was: still in
        // the retry set once, not sent, its marker alive.
        #expect(try retrying().filter { $0.delivery == kept.delivery }.count == 1)
        #expect(!receiver.deliveries.contains { $0.eventID == keptEvent && $0.status == 200 })
        #expect(try redis.send(["TTL", keys.webhookMarker(deliveryID: kept.delivery)]).int ?? 0 > 3 * 86_400)
        // Due now: the workers send it, and every event of both users follows, each once.
        #expect(try redis.send(bytes: [Array("ZADD".utf8), Array(keys.retry.utf8), Array("0".utf8), kept.member]).int == 0)
        let pg = try system.postgres()
        defer { pg.close() }
        let settled = try await eventually(timeout: .seconds(60)) {
            let row = try pg.query(
                """
                SELECT count(*) AS n, count(*) FILTER (WHERE status = 'delivered') AS delivered
                FROM webhook_deliveries WHERE app_id = \(system.app.id)
                """
            ).rows.first
            return row?.int("n") == row?.int("delivered")
        }
        #expect(settled, "\((try? deliveryRows(system)) ?? [])")
        let events = try await pg.query("SELECT id FROM events WHERE app_id = \(system.app.id)").rows.compactMap { $0.uuid("id")?.canonical }
        let sent = receiver.deliveries.filter { $0.status == 200 }.map(\.eventID)
        #expect(Set(sent) == Set(events), "every event delivered")
        #expect(sent.count == Set(sent).count, "none twice: \(sent.count) deliveries of \(Set(sent).count) events")
    }
}
