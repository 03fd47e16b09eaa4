import Foundation
import Hiredis
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// An erasure request carried out: `DELETE /admin/api/customers/{app}/{user}` leaves no row and no
/// Redis key holding the user's ids or receipt, found by scanning every table and every key, while
/// the ledger's amounts stay and the erasure is audited without the user.
@Suite("Customer erasure (issue 44 item 3)", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct CustomerErasureTests {
    let admin = AdminAPITests()

    @Test("Erasing a merged customer removes their ids and receipts from every table and key, keeps the ledger's sums, audits without the user")
    func erasesEverywhere() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let app = system.app.id
        // Deliveries: an endpoint takes every event, paused, so that its rows wait in Postgres. (A
        // delivery a worker holds while the erasure runs can come back to the retries after it: the
        // race the README names; with a live endpoint that never answers, a loaded machine met it.)
        let hook = #"{"app_id":"\#(app.canonical)","url":"http://127.0.0.1:9/hook","allow_private":true,"events":["*"]}"#
        let endpoint = try #require(try await admin.send(system, "POST", "/admin/api/webhooks", body: hook).json?["id"]?.stringValue)
        #expect(try await admin.send(system, "POST", "/admin/api/webhooks/\(endpoint)/pause").status == 200)
        // A merged customer with receipts, a subscription, events and a grant; another user, who stays.
        let customer = try await MergedCustomer.make(system, prefix: "erase", reason: "erasure test")
        let (user, alias, other, receipt) = (customer.user, customer.alias, customer.other, customer.receipt)
        // Jobs of the customer no worker will take before the erasure: one waiting in backoff (an
        // hour away), one dead, one in a queue no worker reads; and the other user's, which stay.
        let redis = try system.redis()
        defer { redis.close() }
        let keys = system.configuration.keys
        let (pending, _) = try system.forgeReceipt()
        let (otherPending, _) = try system.forgeReceipt()
        func job(_ who: String) -> JobEnvelope {
            JobEnvelope(
                id: UUID(), appID: app, enqueuedAt: Date(), origin: .api,
                payload: .receipt(ReceiptJob(receipt: who == other ? otherPending : pending, submission: Submission(userIdentifier: who))))
        }
        let later = String(Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)
        let (theirJob, keptJob) = (job(alias), job(other))
        _ = try redis.send(bytes: [Array("ZADD".utf8), Array(keys.retry.utf8), Array(later.utf8), theirJob.encoded()])
        _ = try redis.send(bytes: [Array("ZADD".utf8), Array(keys.retry.utf8), Array(later.utf8), keptJob.encoded()])
        _ = try redis.send(bytes: [Array("ZADD".utf8), Array(keys.dead.utf8), Array("1".utf8), job(user).encoded()])
        _ = try redis.send(bytes: [Array("LPUSH".utf8), Array(keys.queue("erasure-test").utf8), job(user).encoded()])
        _ = try redis.send(["SET", keys.pending(theirJob.header.id.canonical), "{\"user_identifier\":\"\(alias)\"}"])

        let pg = try system.postgres()
        defer { pg.close() }
        let ledger = "SELECT currency, sum(price_milli)::text AS total, count(*) AS n, count(cancellation_date) AS refunds FROM in_app_purchases"
        func sums() async throws -> [String] {
            try await pg.query("\(unescaped: ledger) WHERE app_id = \(app) GROUP BY currency ORDER BY currency").rows.map {
                "\($0.string("currency") ?? "-") \($0.string("total") ?? "-") \($0.int("n") ?? -1) \($0.int("refunds") ?? -1)"
            }
        }
        let before = try await sums()
        let deliveries = try await pg.query(
            "SELECT count(*) AS n FROM webhook_deliveries d JOIN events e ON e.id = d.event_id WHERE e.user_identifier IN (\(user), \(alias))"
        ).rows.first?.int("n")
        #expect((deliveries ?? 0) > 0, "the customer has deliveries to erase")

        // Erased by its alias: the whole merged customer goes.
        let answer = try await admin.send(system, "DELETE", "/admin/api/customers/\(app.canonical)/\(alias)")
        #expect(answer.status == 200, "\(String(decoding: answer.body, as: UTF8.self))")
        let erasureID = try #require(answer.json?["erasure_id"]?.stringValue)
        #expect((answer.json?["user_identifiers"]?.arrayValue ?? []).compactMap(\.stringValue) == [alias, user].sorted())
        // Our three at least (a delivery queued before the pause may be among them).
        #expect((answer.json?["dropped_jobs"]?.intValue ?? 0) >= 3)

        // Every table of the schema, every row as text: neither id nor the receipt is left, but in
        // the `customer.erased` event itself (and its deliveries), which names the id for the backend.
        let tables = try await pg.query(
            "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        ).rows.compactMap { $0.string("t") }
        #expect(tables.contains("receipts") && tables.count > 20)
        for table in tables {
            let erasedEvent: String =
                switch table {
                case "events": " AND type <> 'customer.erased'"
                case "webhook_deliveries": " AND event_id NOT IN (SELECT id FROM events WHERE type = 'customer.erased')"
                default: ""
                }
            for needle in [user, alias, receipt] {
                let found = try await pg.query(
                    "SELECT count(*) AS n FROM \(unescaped: table) t WHERE strpos(t::text, \(needle)) > 0\(unescaped: erasedEvent)"
                ).rows.first?.int("n")
                #expect(found == 0, "\(table) still holds \(needle == receipt ? "the receipt" : needle)")
            }
        }
        #expect(try await sums() == before, "the ledger's amounts and refunds per currency are unchanged")
        let kept = try await pg.query("SELECT count(*) AS n FROM receipts WHERE user_identifier = \(other)").rows.first?.int("n")
        #expect(kept == 1, "the other user's receipt stays")

        // Every key of the test's prefix, names and values, the same (a delivery of the erasure's
        // own event excepted).
        var cursor = "0"
        var leftovers: [String] = []
        var sawKept = false
        repeat {
            let reply = try redis.send(["SCAN", cursor, "MATCH", keys.prefix + "*", "COUNT", "1000"]).array ?? []
            cursor = reply.first?.string ?? "0"
            for key in (reply.count > 1 ? reply[1].array ?? [] : []).compactMap(\.string) {
                let type = try redis.send(["TYPE", key]).string ?? ""
                let values: [[UInt8]] =
                    switch type {
                    case "string": [try redis.send(["GET", key]).bytes ?? []]
                    case "list": (try redis.send(["LRANGE", key, "0", "-1"]).array ?? []).compactMap(\.bytes)
                    case "zset": (try redis.send(["ZRANGE", key, "0", "-1"]).array ?? []).compactMap(\.bytes)
                    case "hash": (try redis.send(["HGETALL", key]).array ?? []).compactMap(\.bytes)
                    case "set": (try redis.send(["SMEMBERS", key]).array ?? []).compactMap(\.bytes)
                    default: []
                    }
                for value in values {
                    if let envelope = try? JobEnvelope.decode(value) {
                        if envelope.header.id == keptJob.header.id { sawKept = true }
                        if case .delivery(let delivery) = envelope.payload, delivery.target.eventType == EventType.customerErased.rawValue {
                            continue
                        }
                    }
                    let text = key + " " + String(decoding: value, as: UTF8.self)
                    for needle in [user, alias, receipt, pending] where text.contains(needle) { leftovers.append(key) }
                }
                for needle in [user, alias] where key.contains(needle) { leftovers.append(key) }
            }
        } while cursor != "0"
        #expect(leftovers.isEmpty, "Redis still holds the customer: \(leftovers)")
        #expect(sawKept, "the other user's job stays")

        // The audit line: who and when, the erasure's id, not the user.
        let lines = try await pg.query(
            "SELECT target, user_identifiers::text AS users, outcome FROM audit_log WHERE app_id = \(app) AND action = 'customer.erase'"
        ).rows
        #expect(lines.count == 1)
        #expect(lines.first?.string("target") == "erasure \(erasureID)" && lines.first?.string("users") == "{}")
        #expect(lines.first?.string("outcome") == "done")
        // The backend is told, under the id it knows.
        let told = try await eventually(timeout: .seconds(30)) {
            let (_, events) = try await system.get(path: "/client/events?user_identifier=\(alias)&type=customer.erased")
            return events?["events"]?.arrayValue?.first?["data"]?["erasure_id"]?.stringValue == erasureID
        }
        #expect(told)

        // An unknown app, at the longest id, though an audit line names them (a refused request's):
        // 404, not an error.
        let (nowhere, nobody) = (UUID().uuidString, String(repeating: "0", count: 255))
        _ = try await pg.query(
            "INSERT INTO audit_log (actor, action, source, app_id, user_identifiers) VALUES ('test', 'test', 'api', \(UUID(uuidString: nowhere)), ARRAY[\(nobody)])"
        )
        #expect(try await admin.send(system, "DELETE", "/admin/api/customers/\(nowhere)/\(nobody)").status == 404)
        // Again: nothing holds the customer any more.
        #expect(try await admin.send(system, "DELETE", "/admin/api/customers/\(app.canonical)/\(alias)").status == 404)
        #expect(try await admin.send(system, "DELETE", "/admin/api/customers/\(app.canonical)/\(user)").status == 404)

        // The command line erases the other user, audited as its own; then finds nothing.
        // The system's own settings: its Redis prefix is where the other user's job waits.
        let settings = system.commandLineEnvironment().mapValues { Optional($0) }
        let run = try await OperatorTests().receiptq(["customers", "erase", "--app", system.app.name, "--user", other], environment: settings)
        #expect(run.status == 0 && run.output.contains("erasure ") && !run.output.contains(" 0 job(s) dropped"), "\(run.output)")
        let gone = try await pg.query("SELECT count(*) AS n FROM receipts WHERE user_identifier = \(other)").rows.first?.int("n")
        #expect(gone == 0)
        let again = try await OperatorTests().receiptq(
            ["customers", "erase", "--app", system.app.name, "--user", other], environment: settings)
        #expect(again.status == 0 && again.output.contains("nothing held"), "\(again.output)")
        let sources = try await pg.query(
            "SELECT source FROM audit_log WHERE app_id = \(app) AND action = 'customer.erase' ORDER BY id"
        ).rows.compactMap { $0.string("source") }
        #expect(sources == ["api", "cli"])
    }
}
