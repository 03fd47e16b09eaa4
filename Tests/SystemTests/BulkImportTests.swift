import Curl
import DevTools
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

/// The batch endpoint of bulk imports against real Redis, Postgres and the mock App Store: every
/// item judged on its own and answered in input order, the accepted ones validated through the
/// import queue, and the limits of a batch.
@Suite("Bulk import: the batch endpoint and the import queue", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct BulkImportTests {
    static let batchPath = "/client/itunes_connect/receipts/batch"

    @Test("A JSON array: each item its own outcome in input order; the accepted ones validated once each, through the import queue")
    func jsonArray() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (first, _) = try system.forgeReceipt()
        let (second, _) = try system.forgeReceipt()
        let stranger = try TestCertificateAuthority.generate(name: "Not Apple Root CA")
        let forged = Data(try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: system.app.bundleID), authority: stranger))
            .base64EncodedString()
        let body = """
            [{"receipt":"\(first)","user_identifier":"imported-1"},
             {"receipt":"\(second)","user_identifier":"imported-2"},
             {"receipt":"\(first)","user_identifier":"imported-1"},
             {"receipt":"not a receipt"},
             {"receipt":"\(forged)"},
             {"receipt":"\(second)","user_identifier":"bad\\u0000name"},
             {"user_identifier":"no receipt"},
             [1, 2]]
            """
        let (status, answer) = try await system.post(body, path: Self.batchPath)
        #expect(status == 200)
        let items = try #require(answer?["items"]?.arrayValue)
        #expect(items.count == 8)
        #expect(items.map { $0["index"]?.intValue } == Array(0..<8))
        #expect(items.map { $0["status"]?.intValue } == [206, 206, 206, 422, 402, 422, 422, 422])
        // The same receipt twice in one batch is one receipt: the first is queued, the later one is
        // always its duplicate (the batch is deduplicated before anything reaches Redis).
        #expect(items[0]["duplicate"] == nil)
        #expect(items[2]["duplicate"] == .bool(true))
        #expect(items[2]["id"] == items[0]["id"])
        #expect(items[3]["errors"]?.arrayValue?.first?["field"]?.stringValue == "receipt")
        #expect(items[4]["fraud_reason"]?.stringValue == "untrusted_chain")
        #expect(items[5]["errors"]?.arrayValue?.first?["field"]?.stringValue == "user_identifier")
        #expect(items[6]["errors"]?.arrayValue?.first?["field"]?.stringValue == "receipt")
        #expect(items[7]["errors"]?.arrayValue?.first?["field"]?.stringValue == "body")
        #expect(answer?["counts"]?["accepted"]?.intValue == 2)
        #expect(answer?["counts"]?["duplicate"]?.intValue == 1)
        #expect(answer?["counts"]?["fraud"]?.intValue == 1)
        #expect(answer?["counts"]?["invalid"]?.intValue == 4)
        let importID = try #require(answer?["import_id"]?.stringValue.flatMap(UUID.init(uuidString:)))

        // Validated by the worker from the import queue, as the receipts a single POST brings.
        let ids = [items[0], items[1]].compactMap { $0["id"]?.stringValue }
        for id in ids {
            let validated = try await eventually { try await system.get(id).1?["validation_status"]?.stringValue == "valid" }
            #expect(validated, "imported receipt \(id) validated")
        }
        let pg = try system.postgres()
        defer { pg.close() }
        // The forgery is stored too (as fraud), from the same queue.
        #expect(
            try await eventually {
                try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 3
            })
        let stored = try await pg.query(
            """
            SELECT user_identifier, status FROM receipts WHERE app_id = \(system.app.id) ORDER BY user_identifier NULLS LAST
            """
        ).rows
        #expect(stored.map { $0.string("user_identifier") } == ["imported-1", "imported-2", nil])
        #expect(stored.map { $0.string("status") } == ["valid", "valid", "fraud"])
        // An import that did not ask for events is recorded without them: no webhook flood.
        #expect(try await pg.query("SELECT count(*) AS n FROM events WHERE app_id = \(system.app.id)").rows.first?.int("n") == 0)
        #expect(importID.canonical == answer?["import_id"]?.stringValue)

        // Its progress, as the dashboard reads it: what the batch queued and what the workers stored.
        let overview = RedisQueueOverview(
            pool: RedisConnectionPool(configuration: system.configuration.redis, size: 1), keys: system.configuration.keys, activityMinutes: 0)
        let run = try #require(try await overview.snapshot().imports.first { $0.id == importID })
        #expect(run.appID == system.app.id)
        #expect(run.queued == 3)
        #expect(run.duplicates == 1)
        #expect(run.invalid == 4)
        #expect(run.stored == 3)
        #expect(run.failed == 0)
        #expect(!run.isRunning)
    }

    @Test("The same receipt for two users in one batch is each user's claim; again for the first user, its duplicate")
    func sameReceiptTwoUsers() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let body = """
            [{"receipt":"\(receipt)","user_identifier":"claim-1"},
             {"receipt":"\(receipt)","user_identifier":"claim-2"},
             {"receipt":"\(receipt)","user_identifier":"claim-1"},
             {"receipt":"\(receipt)"}]
            """
        let (status, answer) = try await system.post(body, path: Self.batchPath)
        #expect(status == 200)
        let items = try #require(answer?["items"]?.arrayValue)
        #expect(items.map { $0["status"]?.intValue } == [206, 206, 206, 206])
        #expect(items[0]["duplicate"] == nil && items[1]["duplicate"] == nil)
        #expect(items[1]["id"] != items[0]["id"], "the second user's claim is a receipt of its own")
        #expect(items[2]["duplicate"] == .bool(true) && items[2]["id"] == items[0]["id"])
        #expect(items[3]["duplicate"] == .bool(true) && items[3]["id"] == items[0]["id"], "without a user: the first receipt")
    }

    @Test("NDJSON: blank lines skipped, items numbered by their line; the import id of the header kept, events when asked")
    func ndjson() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let importID = UUID()
        let body = "\n{\"receipt\":\"\(receipt)\"}\r\n\n{\"receipt\":42}\n"
        let response = try await system.client.send(
            Curl.HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(system.apiPort)\(Self.batchPath)",
                headers: [
                    (name: "Content-Type", value: "application/x-ndjson"), (name: "Authorization", value: "Bearer \(system.token)"),
                    (name: "Receiptq-Import-Id", value: importID.uuidString), (name: "Receiptq-Import-Events", value: "true"),
                ], body: Array(body.utf8)))
        #expect(response.status == 200)
        let answer = try JSONDecoder().decode(JSONValue.self, from: Data(response.body))
        #expect(answer["import_id"]?.stringValue == importID.canonical)
        let items = try #require(answer["items"]?.arrayValue)
        #expect(items.map { $0["line"]?.intValue } == [2, 4])
        #expect(items.map { $0["status"]?.intValue } == [206, 422])
        let id = try #require(items[0]["id"]?.stringValue)
        #expect(try await eventually { try await system.get(id).1?["validation_status"]?.stringValue == "valid" })
        // This import asked for events: its receipt's are recorded as a live one's.
        let pg = try system.postgres()
        defer { pg.close() }
        let types = try await pg.query("SELECT type FROM events WHERE app_id = \(system.app.id) ORDER BY id").rows.compactMap { $0.string("type") }
        #expect(types.contains("receipt.validated"))
        #expect(types.contains("subscription.started"))
    }

    @Test("A batch's limits: 401, 415, 413 past 1,000 items, 422 for what is not a batch or a bad import id")
    func limits() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        #expect(try await system.post("[]", token: "rq_nobody000", path: Self.batchPath).0 == 401)
        #expect(try await system.post("[]", contentType: "text/plain", path: Self.batchPath).0 == 415)
        let tooMany = "[" + Array(repeating: #"{"receipt":"x"}"#, count: 1_001).joined(separator: ",") + "]"
        #expect(try await system.post(tooMany, path: Self.batchPath).0 == 413)
        for body in ["[]", "{}", "[1,]", "[1] 2", "not json", "[{\"receipt\":\"x\"}"] {
            let (status, answer) = try await system.post(body, path: Self.batchPath)
            #expect(status == 422, "\(body)")
            #expect(answer?["errors"]?.arrayValue?.first?["field"]?.stringValue == "body")
        }
        let response = try await system.client.send(
            Curl.HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(system.apiPort)\(Self.batchPath)",
                headers: [
                    (name: "Content-Type", value: "application/json"), (name: "Authorization", value: "Bearer \(system.token)"),
                    (name: "Receiptq-Import-Id", value: "not-a-uuid"),
                ], body: Array("[]".utf8)))
        #expect(response.status == 422)
        let events = try await system.client.send(
            Curl.HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(system.apiPort)\(Self.batchPath)",
                headers: [
                    (name: "Content-Type", value: "application/json"), (name: "Authorization", value: "Bearer \(system.token)"),
                    (name: "Receiptq-Import-Events", value: "maybe"),
                ], body: Array(#"[{"receipt":"x"}]"#.utf8)))
        #expect(events.status == 422)
        #expect(String(decoding: events.body, as: UTF8.self).contains("Receiptq-Import-Events"))
    }

    @Test("Workers take import jobs only with room the live queues leave, and at most their share")
    func importLane() throws {
        let configuration = try TestSystem.migratedDatabase()
        let prefix = "{rqt-import-\(UUID().uuidString.prefix(8).lowercased())}"
        let keys = RedisKeys(prefix: prefix)
        let redis = try RedisConnection(configuration: configuration.redis)
        defer {
            for key in [keys.queue("validate"), keys.queue("import"), keys.processing("it-import")] { _ = try? redis.send(["DEL", key]) }
            redis.close()
        }
        func job(importing: Bool) -> [UInt8] {
            let receipt = PurchaseJob.receipt(ReceiptJob(receipt: "x"))
            let envelope = JobEnvelope(
                id: JobID.make(), appID: UUID(), enqueuedAt: Date(), origin: .api,
                payload: importing ? .importItem(ImportItem(importID: UUID(), emitsEvents: false, purchase: receipt)) : receipt.payload)
            return envelope.encoded()
        }
        for _ in 0..<5 { _ = try redis.send(bytes: [Array("LPUSH".utf8), Array(keys.queue("validate").utf8), job(importing: false)]) }
        for _ in 0..<5 { _ = try redis.send(bytes: [Array("LPUSH".utf8), Array(keys.queue("import").utf8), job(importing: true)]) }
        let queue = RedisWorkQueue(connection: redis, keys: keys, workerID: "it-import")
        // No share: the import queue is not touched, even with every slot free.
        var live = 0
        while true {
            let taken = try queue.reserve(max: 64, background: 0, timeout: .zero)
            #expect(taken.allSatisfy { $0.envelope?.importID == nil })
            live += taken.count
            if taken.isEmpty { break }
        }
        #expect(live == 5)
        #expect(try redis.send(["LLEN", keys.queue("import")]).int == 5)
        // Live jobs again: every reserve that may still leave one behind takes no import job; the
        // first that finds the live queues short takes at most `background` of them.
        for _ in 0..<5 { _ = try redis.send(bytes: [Array("LPUSH".utf8), Array(keys.queue("validate").utf8), job(importing: false)]) }
        var imported = 0
        live = 0
        for _ in 0..<10 {
            let taken = try queue.reserve(max: 4, background: 2, timeout: .zero)
            let importing = taken.filter { $0.envelope?.importID != nil }.count
            #expect(importing <= 2)
            if importing > 0 {
                #expect(try redis.send(["LLEN", keys.queue("validate")]).int == 0, "no import job while live jobs wait")
            }
            imported += importing
            live += taken.count - importing
        }
        #expect(live == 5)
        #expect(imported == 5)
        #expect(try redis.send(["LLEN", keys.queue("import")]).int == 0)
    }
}
