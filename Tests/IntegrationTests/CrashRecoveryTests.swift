import Foundation
import Hiredis
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature
import ReceiptTesting
import RedisJobQueue
import Testing

/// Real worker processes (`receiptq work`), killed with SIGKILL in the middle of a batch.
@Suite("Crash recovery: kill -9 of a worker process", .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct CrashRecoveryTests {
    static let binary = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".build/debug/receiptq")

    @Test("Thousands of jobs, a worker killed mid-batch, a janitor pass: every job validated exactly once")
    func killNineMidBatch() async throws {
        let jobs = 3000
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build receiptq first (swift build)")
        let mock = try await MockAppStore.start(state: MockAppStoreState(baseDelay: .milliseconds(20)))
        defer { Task { await mock.stop() } }
        var environment = ProcessInfo.processInfo.environment
        environment.merge([
            "REDIS_HOSTNAME": TestEnvironment.redisHost, "REDIS_PORT": String(TestEnvironment.redisPort),
            "REDIS_KEY_PREFIX": "{rqt-\(UUID().uuidString.prefix(8).lowercased())}",
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase,
            "APPSTORE_PRODUCTION_URL": mock.productionURL, "APPSTORE_SANDBOX_URL": mock.sandboxURL,
            "WORKER_CONCURRENCY": "16", "WORKER_HEARTBEAT_TTL_SECONDS": "2", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10",
            "LOG_LEVEL": "error",
        ]) { _, new in new }
        let configuration = try AppConfiguration(environment: environment)
        try ReceiptQueueApp.migrate(configuration)
        let pg = try PostgresConnection(configuration: configuration.postgres)
        defer { pg.close() }
        let (app, _) = try AppAdmin(connection: pg).addApp(
            name: "crash-\(UUID().uuidString)", bundleID: "com.example.crash.\(UUID().uuidString.prefix(6))", sharedSecret: "s")
        mock.state.setSharedSecret("s", for: app.bundleID)

        // One production receipt (one Apple call per job), many jobs.
        var receipt = ReceiptForger.demoReceipt(bundleID: app.bundleID)
        receipt.environment = .production
        let data = Data(try ReceiptForger.unified(receipt, authority: try TestCertificateAuthority.generate())).base64EncodedString()
        let redis = try RedisConnection(configuration: configuration.redis)
        defer { redis.close() }
        let keys = configuration.keys
        for batch in stride(from: 0, to: jobs, by: 500) {
            _ = try redis.pipeline(
                bytes: (batch..<min(batch + 500, jobs)).map { _ in
                    let envelope = JobEnvelope(
                        id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: Date(), origin: .api, receipt: data)
                    return [Array("LPUSH".utf8), Array(keys.queue("validate").utf8), envelope.encoded()]
                })
        }

        func stored() throws -> Int {
            try pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(app.id) AND status = 'valid'").rows.first?.int("n") ?? -1
        }
        func inProcessing() throws -> Int {
            let workers = try redis.send(["SMEMBERS", keys.workers]).array ?? []
            return try workers.compactMap(\.string).reduce(0) { $0 + (try redis.send(["LLEN", keys.processing($1)]).int ?? 0) }
        }

        let first = try Self.startWorker(environment)
        let killedAtDeadline = ContinuousClock.now + .seconds(60)
        while try stored() < jobs / 10, ContinuousClock.now < killedAtDeadline { try await Task.sleep(for: .milliseconds(20)) }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        let orphaned = try inProcessing()
        let storedAtKill = try stored()
        #expect(storedAtKill < jobs, "the worker was killed mid-batch")
        #expect(orphaned > 0, "jobs were in flight when the worker died")

        // A new worker takes the rest of the queue; the janitor gives back what the dead one held.
        let second = try Self.startWorker(environment)
        let maintenance = RedisMaintenance(connection: try RedisConnection(configuration: configuration.redis), keys: keys)
        let deadline = ContinuousClock.now + .seconds(120)
        while try stored() < jobs, ContinuousClock.now < deadline {
            _ = try maintenance.requeueOrphans()
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(try stored() == jobs)

        // Exactly once: one receipt row per job (its primary key) and one Apple call recorded per job,
        // even for jobs committed by the dead worker but never acknowledged.
        let calls = try await pg.query(
            """
            SELECT count(*) AS n FROM (
              SELECT a.receipt_id FROM validation_attempts a JOIN receipts r ON r.id = a.receipt_id
              WHERE r.app_id = \(app.id) GROUP BY a.receipt_id HAVING count(*) <> 1) odd
            """
        ).rows.first?.int("n")
        #expect(calls == 0)
        #expect(try redis.send(["LLEN", keys.queue("validate")]).int == 0)
        #expect(try redis.send(["ZCARD", keys.dead]).int == 0)
        #expect(try inProcessing() == 0)

        // SIGTERM: the surviving worker drains and exits cleanly.
        kill(second.processIdentifier, SIGTERM)
        second.waitUntilExit()
        #expect(second.terminationReason == .exit && second.terminationStatus == 0)
    }

    @Test("1,000 jobs in flight on a few threads; SIGTERM mid-batch drains them, exits 0 and leaves nothing held")
    func sigtermMidBatch() async throws {
        let jobs = 3000
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build receiptq first (swift build)")
        // Apple slow enough that a full window of 1,000 calls is in flight at once.
        let mock = try await MockAppStore.start(state: MockAppStoreState(baseDelay: .milliseconds(1500)))
        defer { Task { await mock.stop() } }
        var environment = ProcessInfo.processInfo.environment
        environment.merge([
            "REDIS_HOSTNAME": TestEnvironment.redisHost, "REDIS_PORT": String(TestEnvironment.redisPort),
            "REDIS_KEY_PREFIX": "{rqt-\(UUID().uuidString.prefix(8).lowercased())}",
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase,
            "APPSTORE_PRODUCTION_URL": mock.productionURL, "APPSTORE_SANDBOX_URL": mock.sandboxURL,
            "WORKER_CONCURRENCY": "1000", "WORKER_HEARTBEAT_TTL_SECONDS": "30", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "60",
            "LOG_LEVEL": "error",
        ]) { _, new in new }
        let configuration = try AppConfiguration(environment: environment)
        try ReceiptQueueApp.migrate(configuration)
        let pg = try PostgresConnection(configuration: configuration.postgres)
        defer { pg.close() }
        let (app, _) = try AppAdmin(connection: pg).addApp(
            name: "drain-\(UUID().uuidString)", bundleID: "com.example.drain.\(UUID().uuidString.prefix(6))", sharedSecret: "s")
        mock.state.setSharedSecret("s", for: app.bundleID)
        var receipt = ReceiptForger.demoReceipt(bundleID: app.bundleID)
        receipt.environment = .production
        let data = Data(try ReceiptForger.unified(receipt, authority: try TestCertificateAuthority.generate())).base64EncodedString()
        let redis = try RedisConnection(configuration: configuration.redis)
        defer { redis.close() }
        let keys = configuration.keys
        for batch in stride(from: 0, to: jobs, by: 500) {
            _ = try redis.pipeline(
                bytes: (batch..<min(batch + 500, jobs)).map { _ in
                    let envelope = JobEnvelope(
                        id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: Date(), origin: .api, receipt: data)
                    return [Array("LPUSH".utf8), Array(keys.queue("validate").utf8), envelope.encoded()]
                })
        }
        func stored() throws -> Int {
            try pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(app.id) AND status = 'valid'").rows.first?.int("n") ?? -1
        }
        func inProcessing() throws -> Int {
            let workers = try redis.send(["SMEMBERS", keys.workers]).array ?? []
            return try workers.compactMap(\.string).reduce(0) { $0 + (try redis.send(["LLEN", keys.processing($1)]).int ?? 0) }
        }

        let worker = try Self.startWorker(environment)
        // Wait until the window is full: 1,000 jobs held, most of them waiting on Apple.
        let fullBy = ContinuousClock.now + .seconds(60)
        var held = 0
        while held < 1000, ContinuousClock.now < fullBy {
            held = try inProcessing()
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(held == 1000)
        let threads = Self.threadCount(worker.processIdentifier)
        #expect(threads > 0 && threads < 64, "1,000 calls in flight must not mean 1,000 threads (saw \(threads))")

        kill(worker.processIdentifier, SIGTERM)
        worker.waitUntilExit()
        #expect(worker.terminationReason == .exit && worker.terminationStatus == 0)
        // Drained, not abandoned: every job it held was stored and acknowledged, none left held.
        #expect(try inProcessing() == 0)
        let queued = try redis.send(["LLEN", keys.queue("validate")]).int ?? -1
        let afterDrain = try stored()
        #expect(afterDrain >= 1000)
        #expect(afterDrain + queued == jobs, "every job is either stored or still queued")

        // Another worker finishes the queue without any janitor.
        let next = try Self.startWorker(environment)
        let deadline = ContinuousClock.now + .seconds(120)
        while try stored() < jobs, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(try stored() == jobs)
        let twice = try await pg.query(
            """
            SELECT count(*) AS n FROM (
              SELECT a.receipt_id FROM validation_attempts a JOIN receipts r ON r.id = a.receipt_id
              WHERE r.app_id = \(app.id) GROUP BY a.receipt_id HAVING count(*) <> 1) odd
            """
        ).rows.first?.int("n")
        #expect(twice == 0)
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

    static func startWorker(_ environment: [String: String]) throws -> Process {
        let process = Process()
        process.executableURL = binary
        process.arguments = ["work"]
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }
}
