import Curl
import Foundation
import Hiredis
import Libpq
import ReceiptCore
import ReceiptQueueApp

/// `peer_sidekiq`: the same validations as the `pipeline` row, done by the obvious alternative — a
/// plain Sidekiq job (`bench/peer/validate_receipt_job.rb`, Debian's ruby-sidekiq 6.4 and ruby-pg):
/// POST to the same mock App Store, parse the answer, one transaction that upserts the receipt and
/// its purchases with `synchronous_commit` on.
///
/// The jobs are the pipeline's receipts (each its own transaction ids), pushed straight into the
/// Sidekiq queue in Sidekiq's own format on a Redis database of their own, enough for the warm-up
/// and the window. Throughput is the peer's receipts committed in the window ÷ its length, as the
/// pipeline counts `validated_at`; CPU per job of Sidekiq, Postgres and the mock over the window.
enum PeerSidekiqRow: BenchRow {
    static let name = "peer_sidekiq"
    static let summary = "the pipeline's work as a plain Sidekiq job (POST + one Postgres transaction), validations/s per concurrency"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let packages = ["ruby-sidekiq", "ruby-pg"]
    static let options = [
        OptionSpec(name: "--concurrency", takesValue: true, help: "Sidekiq threads per level, comma-separated (default 100,400)"),
        OptionSpec(name: "--latency-ms", takesValue: true, help: "the mock App Store's latency (default 50)"),
        OptionSpec(name: "--warmup-seconds", takesValue: true, help: "load before the window (default 4)"),
        OptionSpec(name: "--seconds", takesValue: true, help: "the measured window (default 12)"),
        OptionSpec(name: "--processes", takesValue: true, help: "Sidekiq processes sharing the concurrency (default: one per core)"),
        OptionSpec(name: "--redis-db", takesValue: true, help: "the Redis database Sidekiq uses, flushed per level (default 3)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary that runs the mock (default: the release build)"),
    ]

    /// One Sidekiq process per core.
    static var defaultProcesses: Int { max(1, ProcessInfo.processInfo.activeProcessorCount) }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let concurrencies = try options.positiveList("--concurrency", default: "100,400")
        let latencyMs = Int(options.extra["--latency-ms"] ?? "50") ?? 50
        let warmup = Double(options.extra["--warmup-seconds"] ?? "4") ?? 4
        let seconds = max(1, Double(options.extra["--seconds"] ?? "12") ?? 12)
        let peer = try Peer(
            receiptq: PipelineRow.locateReceiptq(options.extra["--receiptq"]), latencyMs: latencyMs, warmup: warmup, seconds: seconds,
            redisDB: options.positive("--redis-db", default: 3), processes: options.positive("--processes", default: defaultProcesses))
        defer { peer.close() }
        var table = TextTable(
            title: "peer_sidekiq: Sidekiq \(peer.version) job → mock App Store (\(latencyMs) ms) → Postgres (synchronous_commit on); "
                + "\(Format.json(warmup)) s warm-up, \(Format.json(seconds)) s window",
            headers: ["level", "rps", "ideal", "% ideal", "sidekiq µs/job", "pg µs/job", "mock µs/job", "sidekiq rss MB", "machine busy %"])
        table.title += "; \(peer.processes) Sidekiq processes"
        table.notes = ["ideal = concurrency ÷ mock latency; rps = peer receipts committed in the window ÷ its length"]
        var levels: [String: Any] = [:]
        for concurrency in concurrencies {
            let level = try peer.measure(concurrency: concurrency)
            table.add([
                "c\(concurrency)", Format.rate(level.rps), Format.rate(level.ideal), String(format: "%.1f", 100 * level.rps / level.ideal),
                Format.micros(level.sidekiqMicros), Format.micros(level.postgresMicros), Format.micros(level.mockMicros),
                String(format: "%.0f", level.rssMB), String(format: "%.1f", level.machineBusy),
            ])
            levels["c\(concurrency)"] = level.json
        }
        print(table.render())
        return [
            "sidekiq": peer.version, "processes": peer.processes, "latency_ms": latencyMs, "warmup_seconds": warmup, "seconds": seconds,
            "levels": levels,
        ]
    }

    /// One level's numbers.
    struct Level {
        var concurrency: Int
        var rps: Double
        var ideal: Double
        var sidekiqMicros: Double
        var postgresMicros: Double
        var mockMicros: Double
        var rssMB: Double
        var machineBusy: Double

        var json: [String: Any] {
            [
                "rps": Format.json(rps), "ideal": Format.json(ideal), "sidekiq_cpu_us_per_job": Format.json(sidekiqMicros),
                "postgres_cpu_us_per_job": Format.json(postgresMicros), "mock_cpu_us_per_job": Format.json(mockMicros),
                "sidekiq_rss_mb": Format.json(rssMB), "machine_busy_percent": Format.json(machineBusy),
            ]
        }
    }

    /// The peer's set-up (its tables, its mock, its Redis database, the receipt template) and its
    /// levels: used by this row and by `pipeline`, which runs it after its own levels.
    final class Peer {
        let version: String
        private let sidekiq: String
        private let job: URL
        private let configuration: AppConfiguration
        private let postgres: PostgresConnection
        private let redis: RedisConnection
        private let postmaster: Int32
        private let mock: BenchMock
        private let factory: JobFactory
        private let latencyMs: Int
        private let warmup: Double
        private let seconds: Double
        private let redisDB: Int
        /// Sidekiq processes a level runs, the concurrency split between them.
        let processes: Int
        private let logDirectory: URL
        private var serial = 0

        init(receiptq: URL, latencyMs: Int, warmup: Double, seconds: Double, redisDB: Int, processes: Int) throws {
            guard let sidekiq = ChildProcess.which("sidekiq") else {
                throw BenchFailure(description: "sidekiq not found: scripts/setup ruby-sidekiq ruby-pg")
            }
            let job = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("bench/peer/validate_receipt_job.rb")
            guard FileManager.default.fileExists(atPath: job.path) else {
                throw BenchFailure(description: "no \(job.path): run from the repository")
            }
            guard redisDB > 0 else { throw BenchFailure(description: "--redis-db 0 is receiptq's database: the peer flushes its own") }
            self.sidekiq = sidekiq
            self.job = job
            self.latencyMs = latencyMs
            self.warmup = warmup
            self.seconds = seconds
            self.redisDB = redisDB
            self.processes = max(1, processes)
            version = PeerSidekiqRow.sidekiqVersion()
            configuration = try AppConfiguration()
            postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench-peer")
            guard let postmaster = PostgresStats.postmasterPID(postgres) else {
                postgres.close()
                throw BenchFailure(description: "peer_sidekiq: Postgres must run on this machine (its CPU is measured)")
            }
            self.postmaster = postmaster
            try PeerSidekiqRow.createTables(postgres)
            redis = try RedisConnection(configuration: configuration.redis, label: "bench-peer")
            logDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bench-peer-\(getpid())")
            try? FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
            factory = try JobFactory(receipt: JobFactory.forgeReceipt(bundleID: PipelineRow.Context.bundleID), appID: JobID.make())
            // Last: nothing after it can throw and leave the mock running.
            mock = try BenchMock(
                receiptq: receiptq, latencyMs: latencyMs, bundleID: PipelineRow.Context.bundleID,
                sharedSecret: PipelineRow.Context.sharedSecret, logDirectory: logDirectory)
        }

        func close() {
            _ = try? PeerSidekiqRow.flush(database: redisDB, redis)
            _ = try? postgres.query("TRUNCATE peer_purchases, peer_receipts")
            _ = mock.process.stop()
            redis.close()
            postgres.close()
        }

        /// Fills the queue for the warm-up and the window, runs Sidekiq with `concurrency` threads
        /// and counts what it commits in the window.
        func measure(concurrency: Int) throws -> Level {
            FileHandle.standardError.write(Data("peer_sidekiq: c\(concurrency)…\n".utf8))
            try PeerSidekiqRow.flush(database: redisDB, redis)
            _ = try postgres.query("TRUNCATE peer_purchases, peer_receipts")
            let ideal = Double(concurrency) * 1_000 / Double(latencyMs)
            let count = Int(ideal * (warmup + seconds + 6))
            try PeerSidekiqRow.enqueue(count: count, from: serial, factory: factory, database: redisDB, redis: redis)
            serial += count
            // The pool is checked out around the transaction only (the HTTP call holds no
            // connection), 50 in all at most, as a team would size it under max_connections (200 here).
            var environment = ProcessInfo.processInfo.environment
            environment.merge([
                "REDIS_URL": PeerSidekiqRow.redisURL(configuration.redis, database: redisDB),
                "PEER_VERIFY_URL": "\(mock.base)/verifyReceipt", "PEER_SHARED_SECRET": PipelineRow.Context.sharedSecret,
                "PEER_DATABASE_URL": PeerSidekiqRow.databaseURL(), "RAILS_ENV": "production",
            ]) { _, new in new }
            // One Sidekiq process per core, the concurrency split between them: Ruby's global lock
            // keeps one process on one core, so that is how such a team deploys it.
            let threads = max(1, concurrency / processes)
            environment["PEER_DB_POOL"] = String(min(threads, 50 / processes))
            // Stopped however the level ends (a process that failed to start, a query that threw).
            var peers: [ChildProcess] = []
            defer { for peer in peers { _ = peer.stop(grace: 10) } }
            for index in 0..<processes {
                peers.append(
                    try ChildProcess(
                        executable: URL(fileURLWithPath: sidekiq), arguments: ["-r", job.path, "-c", String(threads), "-q", "peer"],
                        environment: environment, label: "sidekiq-c\(concurrency)-\(index)", logDirectory: logDirectory))
            }
            func peerCPU() -> Double { peers.reduce(0) { $0 + (ProcessStats.cpuMicros(pid: $1.pid) ?? 0) } }
            pause(seconds: warmup)
            let committedBefore = try PeerSidekiqRow.committed(postgres)
            let machineBefore = MachineCPU.sample()
            let before = (peer: peerCPU(), pg: ProcessStats.familyCPU(parent: postmaster), mock: ProcessStats.cpuMicros(pid: mock.process.pid) ?? 0)
            pause(seconds: seconds)
            let committedAfter = try PeerSidekiqRow.committed(postgres)
            let after = (peer: peerCPU(), pg: ProcessStats.familyCPU(parent: postmaster), mock: ProcessStats.cpuMicros(pid: mock.process.pid) ?? 0)
            let machine = MachineCPU.shares(machineBefore, MachineCPU.sample())
            let rss = peers.compactMap { ProcessStats.memory(pid: $0.pid).map { Double($0.hwmKiB) / 1024 } }.reduce(0, +)
            guard peers.allSatisfy(\.isRunning), committedAfter > committedBefore else {
                throw BenchFailure(description: "peer_sidekiq: nothing committed at c\(concurrency):\n\(peers[0].logTail())")
            }
            let jobs = Double(committedAfter - committedBefore)
            return Level(
                concurrency: concurrency, rps: jobs / seconds, ideal: ideal, sidekiqMicros: (after.peer - before.peer) / jobs,
                postgresMicros: ProcessStats.familyDelta(before.pg, after.pg) / jobs, mockMicros: (after.mock - before.mock) / jobs,
                rssMB: rss, machineBusy: machine.busy)
        }
    }

    /// The peer's own tables, shaped as such a team would: the receipt, and a purchase per transaction.
    static func createTables(_ postgres: PostgresConnection) throws {
        try postgres.execute(
            """
            CREATE TABLE IF NOT EXISTS peer_receipts (
                id uuid PRIMARY KEY, app_id uuid NOT NULL, status integer NOT NULL, environment text,
                receipt_data text NOT NULL, validated_at timestamptz NOT NULL);
            CREATE TABLE IF NOT EXISTS peer_purchases (
                environment text NOT NULL, transaction_id text NOT NULL, original_transaction_id text,
                receipt_id uuid NOT NULL REFERENCES peer_receipts (id), product_id text NOT NULL,
                purchase_date timestamptz, expires_date timestamptz, PRIMARY KEY (environment, transaction_id));
            CREATE INDEX IF NOT EXISTS peer_purchases_receipt_idx ON peer_purchases (receipt_id);
            """)
    }

    static func committed(_ postgres: PostgresConnection) throws -> Int {
        try postgres.query("SELECT count(*) AS n FROM peer_receipts").rows.first?.int("n") ?? 0
    }

    /// Sidekiq's wire format (what `perform_async` pushes), pipelined in chunks.
    static func enqueue(count: Int, from first: Int, factory: JobFactory, database: Int, redis: RedisConnection) throws {
        let appID = UUID().uuidString.lowercased()
        let encoder = JSONEncoder()
        // Each pipeline names its database first: a connection that reconnected in between would
        // otherwise be back on database 0, receiptq's.
        let select = ["SELECT", String(database)]
        var commands: [[String]] = [select, ["SADD", "queues", "peer"]]
        for serial in first..<first + count {
            let now = Date().timeIntervalSince1970
            let payload: [String: JSONValue] = [
                "class": .string("ValidateReceiptJob"), "queue": .string("peer"), "retry": .number(25),
                "jid": .string(String(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(24))),
                "created_at": .number(now), "enqueued_at": .number(now),
                "args": .array([.string(UUID().uuidString.lowercased()), .string(appID), .string(factory.receiptBase64(serial: serial))]),
            ]
            commands.append(["LPUSH", "queue:peer", String(decoding: try encoder.encode(JSONValue.object(payload)), as: UTF8.self)])
            if commands.count >= 500 {
                _ = try redis.pipeline(commands)
                commands = [select]
            }
        }
        if commands.count > 1 { _ = try redis.pipeline(commands) }
    }

    /// Empties the peer's Redis database, and only it: the SELECT travels in the same transaction,
    /// so a connection that reconnected to database 0 (receiptq's) cannot be the one flushed.
    static func flush(database: Int, _ redis: RedisConnection) throws {
        _ = try redis.pipeline([["MULTI"], ["SELECT", String(database)], ["FLUSHDB"], ["EXEC"]])
    }

    /// A URL's user-information part, percent-encoded (a password may hold `@`, `:` or `/`).
    static func credential(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: .urlPasswordAllowed) ?? text }

    /// redis-rb's URL for the bench's Redis, on the peer's own database.
    static func redisURL(_ redis: RedisConfiguration, database: Int) -> String {
        "redis://\(redis.password.map { ":\(credential($0))@" } ?? "")\(redis.host):\(redis.port)/\(database)"
    }

    /// libpq's URL for the servers of `.local/env.sh`.
    static func databaseURL() -> String {
        let environment = ProcessInfo.processInfo.environment
        let user = credential(environment["POSTGRES_USER"] ?? "receiptq")
        let password = environment["POSTGRES_PASSWORD"].map { ":\(credential($0))" } ?? ""
        return "postgres://\(user)\(password)@\(environment["POSTGRES_HOSTNAME"] ?? "127.0.0.1"):\(environment["POSTGRES_PORT"] ?? "5432")/"
            + (environment["POSTGRES_DB"] ?? "receiptq")
    }

    static func sidekiqVersion() -> String {
        guard let ruby = ChildProcess.which("ruby") else { return "?" }
        let result = ChildProcess.run(ruby, ["-e", "require 'sidekiq'; print Sidekiq::VERSION"], timeout: 30)
        return result.status == 0 ? result.output : "?"
    }
}
