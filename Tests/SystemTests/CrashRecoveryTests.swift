import DevTools
import Foundation
import Hiredis
import Libpq
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// Real worker processes (`receiptq work`), killed with SIGKILL or stopped with SIGTERM in the
/// middle of a batch.
@Suite("Crash recovery: kill -9 and SIGTERM of a worker process", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct CrashRecoveryTests {
    /// SIGKILLs `process` once `reached` holds (or after 60 s) and waits for it to die.
    ///
    /// Polled on the suite's own executor (`.blockingWork`): a watch polled from the cooperative
    /// pool, which the full run's crowded start can hold for seconds, once came after the worker had
    /// stored all 3,000 jobs, and no crash was tested. (The callers check how far it got.)
    static func killWorker(_ process: ChildProcess, once reached: @escaping @Sendable () throws -> Bool) async throws {
        _ = try await eventually(timeout: .seconds(60), interval: .milliseconds(10)) { try reached() }
        kill(process.processIdentifier, SIGKILL)
        try await offload { process.waitUntilExit() }
    }

    /// Starts a worker, SIGKILLs it once `killAt` jobs are stored (checking it died mid-batch, jobs
    /// in hand), then starts another and plays the janitor and the scheduler (orphans requeued,
    /// due retries promoted) until every job is stored. Returns the surviving worker.
    func killMidBatchAndRecover(_ fixture: WorkerProcessFixture, killAt: Int) async throws -> ChildProcess {
        let first = try fixture.startWorker()
        try await Self.killWorker(first) { try fixture.stored() >= killAt }
        let orphaned = try fixture.inProcessing()
        let storedAtKill = try fixture.stored()
        #expect(storedAtKill >= killAt && storedAtKill < fixture.jobs, "the worker was killed mid-batch (\(storedAtKill) stored)")
        #expect(orphaned > 0, "jobs were in flight when the worker died")

        // A new worker takes the rest of the queue; the janitor gives back what the dead one held.
        let second = try fixture.startWorker()
        let maintenance = RedisMaintenance(
            connection: try RedisConnection(configuration: try AppConfiguration(environment: fixture.environment).redis), keys: fixture.keys)
        // Bounded, but generous: alone this takes ~20 s; with every other suite on the same two
        // cores it once needed more than 120.
        let recovered = try await eventually(timeout: .seconds(300), interval: .milliseconds(200)) {
            _ = try maintenance.requeueOrphans()
            // The scheduler's part: jobs a rate limit deferred come back when due.
            _ = try maintenance.promoteDueRetries(now: Date(), limit: 500)
            return try fixture.stored() >= fixture.jobs
        }
        // Where the missing ones are (a full run once left 1 of 300 out after the bound), for the next look.
        #expect(
            recovered,
            "every job stored (\((try? fixture.stored()) ?? -1) of \(fixture.jobs)); \((try? fixture.whereabouts()) ?? "whereabouts unreadable")")
        #expect(try fixture.stored() == fixture.jobs)
        // Nothing left anywhere: not queued, not dead, not held.
        #expect(try fixture.queued() == 0)
        #expect(try fixture.redis.send(["ZCARD", fixture.keys.dead]).int == 0)
        #expect(try fixture.inProcessing() == 0)
        return second
    }

    @Test("Thousands of jobs, a worker killed mid-batch, a janitor pass: every job validated exactly once")
    func killNineMidBatch() async throws {
        let jobs = 3000
        let fixture = try await WorkerProcessFixture(
            jobs: jobs, appleDelay: .milliseconds(20),
            worker: ["WORKER_CONCURRENCY": "16", "WORKER_HEARTBEAT_TTL_SECONDS": "2", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10"])
        defer { Task { await fixture.close() } }
        let second = try await killMidBatchAndRecover(fixture, killAt: jobs / 10)

        // Exactly once: one receipt row per job (its primary key) and one Apple call recorded per job,
        // even for jobs committed by the dead worker but never acknowledged.
        #expect(try await fixture.receiptsNotCalledExactlyOnce() == 0)

        // SIGTERM: the surviving worker drains and exits cleanly.
        kill(second.processIdentifier, SIGTERM)
        second.waitUntilExit()
        #expect(second.terminationReason == .exit && second.terminationStatus == 0)
    }

    @Test("Server API path: StoreKit 2 jobs, a worker killed mid-batch, a janitor pass: every job validated once, two calls each")
    func killNineMidBatchServerAPI() async throws {
        // Apple allows an app 50 calls/s per endpoint and the worker keeps to it: 300 jobs take ~6 s.
        let jobs = 300
        let fixture = try await WorkerProcessFixture(
            jobs: jobs, appleDelay: .milliseconds(20),
            worker: ["WORKER_CONCURRENCY": "16", "WORKER_HEARTBEAT_TTL_SECONDS": "2", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10"],
            serverAPI: true)
        defer { Task { await fixture.close() } }
        let second = try await killMidBatchAndRecover(fixture, killAt: jobs / 5)

        let rows = try await fixture.pg.query(
            "SELECT count(*) FILTER (WHERE validated_by = 'server_api') AS api, count(DISTINCT transaction_id) AS ids FROM receipts WHERE app_id = \(fixture.app.id)"
        ).rows.first
        #expect(rows?.int("api") == jobs && rows?.int("ids") == jobs, "one row per transaction, each validated by the Server API")
        let subscriptions = try await fixture.pg.query("SELECT count(*) AS n FROM subscriptions WHERE app_id = \(fixture.app.id)").rows.first
        #expect(subscriptions?.int("n") == jobs, "one subscription per purchase")
        // History and statuses, once each per job, even for jobs the dead worker committed.
        #expect(try await fixture.receiptsNotCalledExactlyOnce(calls: 2) == 0)
        kill(second.processIdentifier, SIGTERM)
        second.waitUntilExit()
        #expect(second.terminationReason == .exit && second.terminationStatus == 0)
    }

    @Test("Server API path: committed jobs run again (a crash between commit and acknowledgement) keep their verdict")
    func replayedServerAPIJobsKeepTheirVerdict() async throws {
        let jobs = 20
        let fixture = try await WorkerProcessFixture(
            jobs: jobs, appleDelay: .milliseconds(1), worker: ["WORKER_CONCURRENCY": "8", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10"],
            serverAPI: true)
        defer { Task { await fixture.close() } }
        let worker = try fixture.startWorker()
        #expect(try await eventually(timeout: .seconds(120)) { try fixture.stored() == jobs })
        // The janitor's requeue of jobs a killed worker had committed but not acknowledged: the
        // same envelopes again. The customer is known now, so each replay is one Get Transaction
        // Info, not the history (a full run once stored two such replays as invalid: the mock
        // knew its synthesized purchases only in the history).
        let infoBefore = fixture.mock.state.serverAPI.calls("production info")
        try fixture.push(fixture.pushed)
        #expect(
            try await eventually(timeout: .seconds(120)) {
                try fixture.queued() == 0 && fixture.inProcessing() == 0 && fixture.mock.state.serverAPI.calls("production info") >= infoBefore + jobs
            }, "every replay asked Apple once: \((try? fixture.whereabouts()) ?? "")")
        let statuses = try await fixture.pg.query("SELECT status, count(*) AS n FROM receipts WHERE app_id = \(fixture.app.id) GROUP BY status").rows
        #expect(statuses.map { "\($0.string("status") ?? "?"): \($0.int("n") ?? 0)" } == ["valid: \(jobs)"])
        kill(worker.processIdentifier, SIGTERM)
        worker.waitUntilExit()
        #expect(worker.terminationReason == .exit && worker.terminationStatus == 0)
    }

    @Test("1,000 jobs in flight on a few threads; SIGTERM mid-batch drains them, exits 0 and leaves nothing held")
    func sigtermMidBatch() async throws {
        let jobs = 3000
        // Apple slow enough that a full window of 1,000 calls is in flight at once.
        let fixture = try await WorkerProcessFixture(
            jobs: jobs, appleDelay: .milliseconds(1500),
            worker: [
                "WORKER_CONCURRENCY": "1000", "WORKER_HEARTBEAT_TTL_SECONDS": "30", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "150", "LOG_LEVEL": "warning",
            ])
        defer { Task { await fixture.close() } }

        let log = FileManager.default.temporaryDirectory.appendingPathComponent("rqt-sigterm-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: log) }
        let worker = try fixture.startWorker(log: log)
        // Wait until the window is full: 1,000 jobs held, most of them waiting on Apple.
        var held = 0
        _ = try await eventually(timeout: .seconds(60), interval: .milliseconds(20)) {
            held = try fixture.inProcessing()
            return held >= 1000
        }
        // The window, plus the fetcher's jobs reserved ahead (a quarter of it, at most a fetch batch).
        #expect(held >= 1000 && held <= 1000 + 128, "held \(held)")
        let threads = Self.threadCount(worker.processIdentifier)
        #expect(threads > 0 && threads < 64, "1,000 calls in flight must not mean 1,000 threads (saw \(threads))")

        kill(worker.processIdentifier, SIGTERM)
        worker.waitUntilExit()
        #expect(worker.terminationReason == .exit && worker.terminationStatus == 0)
        // Drained, not abandoned: every job it held was settled, none left held. Settled means
        // stored, or back in the retry set when its commit failed: other suites restart the shared
        // Postgres (RestartTests), and a commit cut by that is retried, not lost.
        #expect(try fixture.inProcessing() == 0)
        let queued = try fixture.queued()
        let retrying = try fixture.redis.send(["ZCARD", fixture.keys.retry]).int ?? -1
        let afterDrain = try fixture.stored()
        print("CrashRecoveryTests: SIGTERM drain: \(afterDrain) stored, \(queued) queued, \(retrying) waiting for a retry")
        #expect(afterDrain + retrying >= 1000)
        #expect(
            afterDrain + queued + retrying == jobs,
            "every job is stored, queued or waiting for its retry; \((try? fixture.whereabouts()) ?? "?"); the worker said: \((try? String(contentsOf: log, encoding: .utf8))?.suffix(3000) ?? "")"
        )

        // Another worker finishes the queue without any janitor (the retries promoted as the
        // scheduler would, whenever they are due).
        let next = try fixture.startWorker()
        let maintenance = RedisMaintenance(
            connection: try RedisConnection(configuration: try AppConfiguration(environment: fixture.environment).redis), keys: fixture.keys)
        let finished = try await eventually(timeout: .seconds(300), interval: .milliseconds(100)) {
            _ = try maintenance.promoteDueRetries(now: Date().addingTimeInterval(3600), limit: 500)
            return try fixture.stored() >= jobs
        }
        #expect(finished, "every job stored (\((try? fixture.stored()) ?? -1) of \(jobs))")
        #expect(try fixture.stored() == jobs)
        #expect(try await fixture.receiptsNotCalledExactlyOnce() == 0)
        kill(next.processIdentifier, SIGTERM)
        next.waitUntilExit()
        #expect(next.terminationStatus == 0)
    }

    /// The `Threads:` line of /proc/<pid>/status (0 when unreadable).
    static func threadCount(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("Threads:") }
        return line.flatMap { Int($0.dropFirst("Threads:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
    }
}

/// Everything a worker-process test needs: a mock App Store, an app, thousands of queued jobs of
/// one production receipt (one Apple call each), and the counts the tests check.
struct WorkerProcessFixture {
    let jobs: Int
    let mock: RunningMockAppStore
    let environment: [String: String]
    let app: AppRecord
    let pg: PostgresConnection
    let redis: RedisConnection
    let keys: RedisKeys
    /// The queued jobs' envelopes as pushed, to push again (a replay after a crash).
    let pushed: [[UInt8]]

    /// - Parameter serverAPI: StoreKit 2 jobs (a transaction id each) of an app on the Server API
    ///   backend, which the mock answers with a subscription each (two calls: history, statuses).
    init(jobs: Int, appleDelay: Duration, worker settings: [String: String], serverAPI: Bool = false) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ReceiptqExecutable.url.path), "build receiptq first (swift build)")
        self.jobs = jobs
        mock = try await MockAppStore.start(state: MockAppStoreState(baseDelay: appleDelay))
        mock.state.serverAPI.synthesizesUnknownTransactions = true
        let secretsKey = (0..<32).map { _ in UInt8.random(in: 0...255) }
        let trust = FileManager.default.temporaryDirectory.appendingPathComponent("rqt-trust-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: trust, withIntermediateDirectories: true)
        try mock.state.serverAPI.authority.root.pem.write(to: trust.appendingPathComponent("jws-root.pem"), atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment.merge([
            "REDIS_HOSTNAME": TestEnvironment.redisHost, "REDIS_PORT": String(TestEnvironment.redisPort),
            "REDIS_KEY_PREFIX": "{rqt-\(UUID().uuidString.prefix(8).lowercased())}",
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase,
            "APPSTORE_PRODUCTION_URL": mock.productionURL, "APPSTORE_SANDBOX_URL": mock.sandboxURL, "LOG_LEVEL": "error",
            "APPSTORE_SERVER_API_PRODUCTION_URL": mock.serverAPIProductionURL, "APPSTORE_SERVER_API_SANDBOX_URL": mock.serverAPISandboxURL,
            "RECEIPTQ_SECRETS_KEY": Data(secretsKey).base64EncodedString(), "RECEIPTQ_TRUST_ROOTS_DIR": trust.path,
        ]) { _, new in new }
        environment.merge(settings) { _, new in new }
        self.environment = environment
        let configuration = try AppConfiguration(environment: environment)
        try ReceiptQueueApp.migrate(configuration)
        pg = try PostgresConnection(configuration: configuration.postgres)
        (app, _) = try AppAdmin(connection: pg).addApp(
            name: "process-\(UUID().uuidString)", bundleID: "com.example.process.\(UUID().uuidString.prefix(6))", sharedSecret: "s")
        mock.state.setSharedSecret("s", for: app.bundleID)
        if serverAPI {
            let admin = AppAdmin(connection: pg, secrets: try SecretBox(key: secretsKey))
            let key = try PrivateKey.generateP256()
            try admin.setServerAPIKey(appID: app.id, issuerID: "crash-issuer", keyID: "CRASHKEY", privateKeyPEM: try key.pemPKCS8())
            try admin.setValidation(appID: app.id, backend: .serverAPI)
            mock.state.serverAPI.addKey(issuerID: "crash-issuer", keyID: "CRASHKEY", bundleID: app.bundleID, publicKey: try key.publicKey)
        }
        var receipt = ReceiptForger.demoReceipt(bundleID: app.bundleID)
        receipt.environment = .production
        let data = Data(try ReceiptForger.unified(receipt, authority: try TestCertificateAuthority.generate())).base64EncodedString()
        redis = try RedisConnection(configuration: configuration.redis)
        keys = configuration.keys
        pushed = (0..<jobs).map { [app] index in
            let envelope =
                serverAPI
                ? JobEnvelope(
                    id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api,
                    payload: .transaction(
                        TransactionJob(signedTransaction: nil, transactionID: String(7_000_000_000 + index), bundleID: app.bundleID)))
                : JobEnvelope(id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api, payload: .receipt(ReceiptJob(receipt: data)))
            return envelope.encoded()
        }
        try push(pushed)
    }

    /// Pushes encoded envelopes onto the validate queue, 500 to a round trip.
    func push(_ envelopes: [[UInt8]]) throws {
        for batch in stride(from: 0, to: envelopes.count, by: 500) {
            _ = try redis.pipeline(
                bytes: envelopes[batch..<min(batch + 500, envelopes.count)].map { [keys] envelope in
                    [Array("LPUSH".utf8), Array(keys.queue("validate").utf8), envelope]
                })
        }
    }

    func close() async {
        pg.close()
        redis.close()
        await mock.stop()
    }

    /// Starts `receiptq work` with the fixture's environment (its errors appended to `log`).
    func startWorker(log: URL? = nil) throws -> ChildProcess {
        try startProcess(ReceiptqExecutable.url, ["work"], environment: environment, standardError: log)
    }

    /// Where the jobs are that are neither stored nor queued: the retry set, the dead letters and
    /// every processing list (registered or not), with the failure codes of the retried ones.
    func whereabouts() throws -> String {
        let retrying = try redis.send(["ZRANGE", keys.retry, "0", "-1"]).array ?? []
        var codes: [String: Int] = [:]
        for case .bulk(let raw) in retrying { codes[ReservedJob(raw: raw).envelope?.errorCode?.rawValue ?? "?", default: 0] += 1 }
        let dead = try redis.send(["ZCARD", keys.dead]).int ?? -1
        let lists = try redis.send(["KEYS", keys.processing("*")]).array ?? []
        let held = try lists.compactMap(\.string).map { "\($0): \(try redis.send(["LLEN", $0]).int ?? -1)" }
        let queued = try queued()
        // Stored but not valid: a job can end in Postgres with another status (invalid, failed).
        let rows = try pg.query(
            "SELECT status, coalesce(error_code, '-') AS code, coalesce(apple_status, -1) AS apple, count(*) AS n FROM receipts WHERE app_id = \(app.id) GROUP BY 1, 2, 3"
        ).rows.map { "\($0.string("status") ?? "?")/\($0.string("code") ?? "?")/\($0.int("apple") ?? 0): \($0.int("n") ?? 0)" }
        return "queued \(queued), retrying \(retrying.count) \(codes), dead \(dead), processing lists \(held), receipts \(rows)"
    }

    /// Receipts of the app stored as valid.
    func stored() throws -> Int {
        try pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(app.id) AND status = 'valid'").rows.first?.int("n") ?? -1
    }

    /// Jobs held in the processing lists of every registered worker.
    func inProcessing() throws -> Int {
        let workers = try redis.send(["SMEMBERS", keys.workers]).array ?? []
        return try workers.compactMap(\.string).reduce(0) { $0 + (try redis.send(["LLEN", keys.processing($1)]).int ?? 0) }
    }

    /// Jobs still waiting in the validate queue.
    func queued() throws -> Int { try redis.send(["LLEN", keys.queue("validate")]).int ?? -1 }

    /// Receipts whose audit trail does not hold exactly `calls` Apple calls (one per job on
    /// verifyReceipt; history and statuses on the Server API): 0 when every job ran once (a replay
    /// of a committed job adds nothing).
    func receiptsNotCalledExactlyOnce(calls: Int = 1) async throws -> Int? {
        try await pg.query(
            """
            SELECT count(*) AS n FROM (
              SELECT a.receipt_id FROM validation_attempts a JOIN receipts r ON r.id = a.receipt_id
              WHERE r.app_id = \(app.id) GROUP BY a.receipt_id HAVING count(*) <> \(calls)) odd
            """
        ).rows.first?.int("n")
    }
}
