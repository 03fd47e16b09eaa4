import Curl
import Foundation
import Hiredis
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import RedisJobQueue

/// `pipeline`: the whole validation path at a given worker concurrency, with every result durably
/// in Postgres.
///
/// The worker is `receiptq work` (release build) in its own process, with `WORKER_CONCURRENCY=N`
/// and a fresh `REDIS_KEY_PREFIX`, exactly as deployed: its CPU time and memory are read from
/// `/proc/<pid>`. The App Store is `receiptq mock-appstore --latency-ms 50`, another process, whose
/// CPU is reported too (it must not be the bottleneck). Postgres runs with `fsync = on` (checked;
/// the row refuses otherwise) and every worker session gets `synchronous_commit = on` (PGOPTIONS).
///
/// Jobs are pushed straight into the Redis queue as the ingest API would (envelope and receipt;
/// each job's receipt has its own transaction ids), by a feeder that keeps a small backlog so the
/// lanes never starve and a job's queue wait stays short. After a warm-up, one window of
/// `--seconds` is measured:
/// - **rps**: receipts whose `validated_at` falls in the window ÷ its length (Postgres, after the run);
/// - **p50/p99**: enqueue → done, done meaning the result visible in Redis after the Postgres commit
///   and the acknowledgement (what the API's synchronous wait sees): a sample of ~200 jobs/s is
///   watched with `BLPOP` on their result keys (one connection, no load worth mentioning). The
///   `validated_*` latencies (every job: `validated_at − enqueued_at` in Postgres) exclude the
///   commit and the acknowledgement;
/// - **cpu_us_per_job / rss_mb**: the worker process's utime+stime over the window ÷ jobs; VmHWM;
/// - per job, from server counters: Redis commands and round trips, Postgres commits, tuples and
///   WAL fsyncs, and the CPU of Postgres, Redis, the mock and the bench.
///
/// At one concurrency (`--profile-at`, 100) the row also profiles: `perf record` of the worker,
/// Postgres, Redis and the mock for a few seconds after the window.
enum PipelineRow: BenchRow {
    static let name = "pipeline"
    static let summary =
        "receiptq work (own process) → mock App Store (50 ms) → Postgres (fsync on): validations/s, latency, CPU/job at N lanes"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let options = [
        OptionSpec(name: "--concurrency", takesValue: true, help: "worker concurrencies, comma-separated (default 25,100,400,1000)"),
        OptionSpec(name: "--latency-ms", takesValue: true, help: "the mock App Store's latency (default 50)"),
        OptionSpec(name: "--warmup-seconds", takesValue: true, help: "load before the window (default 4)"),
        OptionSpec(name: "--seconds", takesValue: true, help: "the measured window (default 12)"),
        OptionSpec(name: "--profile-at", takesValue: true, help: "profile at this concurrency with perf (default 100; 0 = none)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
        OptionSpec(name: "--allow-fsync-off", takesValue: false, help: "run even if Postgres has fsync off (results marked not durable)"),
        OptionSpec(name: "--keep-data", takesValue: false, help: "keep the bench's apps and receipts in Postgres"),
        OptionSpec(
            name: "--analyze-after-warmup", takesValue: false,
            help: "ANALYZE receipts after the warm-up (diagnostic: statistics that know the level's app)"),
    ]

    /// What every level shares: servers, the mock, the forged receipt.
    final class Context {
        let configuration: AppConfiguration
        let postgres: PostgresConnection
        let redis: RedisConnection
        let postmaster: Int32?
        let receiptq: URL
        let logDirectory: URL
        let latencyMs: Int
        let warmup: Double
        let seconds: Double
        var analyzeAfterWarmup = false
        var mock: ChildProcess?
        var mockBase = ""
        var receipt: JobFactory.ReceiptTemplate?
        var apps: [UUID] = []
        var serial = 0
        static let sharedSecret = "receiptq-bench-shared-secret"
        static let bundleID = "com.example.receiptq.bench"

        init(
            configuration: AppConfiguration, postgres: PostgresConnection, redis: RedisConnection, receiptq: URL,
            latencyMs: Int, warmup: Double, seconds: Double
        ) {
            self.configuration = configuration
            self.postgres = postgres
            self.redis = redis
            self.postmaster = PostgresStats.postmasterPID(postgres)
            self.receiptq = receiptq
            self.latencyMs = latencyMs
            self.warmup = warmup
            self.seconds = seconds
            logDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bench-\(getpid())")
            try? FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
        }

        var idealPerLane: Double { 1_000 / Double(latencyMs) }

        /// A fresh app (its own receipts, for per-level counts), removed at the end unless --keep-data.
        func makeApp(_ label: String) throws -> AppRecord {
            let (app, _) = try AppAdmin(connection: postgres).addApp(
                name: "bench-\(label)-\(UUID().uuidString.prefix(8).lowercased())", bundleID: Self.bundleID,
                sharedSecret: Self.sharedSecret)
            apps.append(app.id)
            return app
        }

        /// The worker's environment: ours (servers from .local/env.sh) plus the level's settings.
        func workerEnvironment(prefix: String, concurrency: Int) -> [String: String] {
            var environment = ProcessInfo.processInfo.environment
            environment.merge([
                "REDIS_KEY_PREFIX": prefix, "WORKER_CONCURRENCY": String(concurrency),
                "APPSTORE_PRODUCTION_URL": "\(mockBase)/verifyReceipt", "APPSTORE_SANDBOX_URL": "\(mockBase)/sandbox/verifyReceipt",
                "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10", "LOG_LEVEL": "warning", "RECEIPTQ_ENV": "development",
            ]) { _, new in new }
            return environment
        }
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        func number(_ name: String, _ fallback: Double) throws -> Double {
            guard let text = options.extra[name] else { return fallback }
            guard let value = Double(text), value >= 0 else { throw BenchFailure(description: "\(name) needs a number, not \(text)") }
            return value
        }
        let levels = try (options.extra["--concurrency"] ?? "25,100,400,1000").split(separator: ",").map { text -> Int in
            guard let value = Int(text.trimmingCharacters(in: .whitespaces)), value > 0 else {
                throw BenchFailure(description: "--concurrency needs positive integers, not \(text)")
            }
            return value
        }
        let latencyMs = Int(try number("--latency-ms", 50))
        let profileAt = Int(try number("--profile-at", 100))
        guard latencyMs > 0 else { throw BenchFailure(description: "--latency-ms must be positive") }

        // Every worker session commits synchronously, whatever the server's default: libpq reads
        // PGOPTIONS at connect time, in the worker (inherited) and in this process alike.
        let pgOptions = ((ProcessInfo.processInfo.environment["PGOPTIONS"] ?? "") + " -c synchronous_commit=on")
            .trimmingCharacters(in: .whitespaces)
        setenv("PGOPTIONS", pgOptions, 1)

        let configuration = try AppConfiguration()
        let receiptq = try locateReceiptq(options.extra["--receiptq"])
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench")
        defer { postgres.close() }
        let durability = try checkDurability(postgres, allowFsyncOff: options.has("--allow-fsync-off"))
        try ReceiptQueueApp.migrate(configuration)
        let redis = try RedisConnection(configuration: configuration.redis, label: "bench")
        defer { redis.close() }

        let context = Context(
            configuration: configuration, postgres: postgres, redis: redis, receiptq: receiptq, latencyMs: latencyMs,
            warmup: try number("--warmup-seconds", 4), seconds: max(1, try number("--seconds", 12)))
        context.analyzeAfterWarmup = options.has("--analyze-after-warmup")
        defer { context.mock?.stop() }
        try startMock(context)
        FileHandle.standardError.write(Data("pipeline: forging the receipt template…\n".utf8))
        context.receipt = try JobFactory.forgeReceipt(bundleID: Context.bundleID)

        var result: [String: Any] = [
            "worker": "receiptq work (separate process, release), one lane = one thread + Redis + Postgres + curl connection",
            "receiptq": receiptq.path,
            "mock_latency_ms": latencyMs,
            "durability": durability,
            "warmup_s": context.warmup,
            "window_s": context.seconds,
            "method": [
                "rps": "receipts with validated_at in the window / window length (Postgres)",
                "p50_ms/p99_ms": "enqueue → result published in Redis after commit + ack (BLPOP on a ~200/s sample of result keys)",
                "validated_ms": "validated_at − enqueued_at of every job enqueued in the window (Postgres; excludes commit + ack)",
                "cpu_us_per_job": "worker process utime+stime over the window / jobs validated in the window",
                "rss_mb": "worker VmHWM (peak RSS) at the end of the window",
            ],
        ]
        var table = TextTable(
            title: "pipeline: receiptq work → mock App Store (\(latencyMs) ms) → Postgres (fsync \(durability["fsync"] ?? "?"), "
                + "synchronous_commit on); \(Format.json(context.warmup)) s warm-up, \(Format.json(context.seconds)) s window",
            headers: [
                "level", "threads", "rps", "ideal", "% ideal", "p50 ms", "p99 ms", "worker µs/job", "rss MB", "pg µs/job",
                "redis µs/job", "mock µs/job", "bench µs/job", "machine busy %",
            ])
        var profile: [String: Any]?
        var details: [String] = []
        do {
            for concurrency in levels {
                let key = "c\(concurrency)"
                FileHandle.standardError.write(Data("pipeline: \(key)…\n".utf8))
                let level = try runLevel(concurrency, context: context, profile: concurrency == profileAt)
                result[key] = level
                table.add(tableRow(key, level))
                if let error = level["error"] as? String {
                    table.notes.append("\(key): \(error): \(level["detail"] ?? "")")
                } else {
                    details.append(levelDetail(key, level))
                }
                if concurrency == profileAt, var measured = result[key] as? [String: Any], let perf = measured.removeValue(forKey: "perf") {
                    // The perf record of the separate processes belongs with the profile, not the level's numbers.
                    profile = ["perf": perf]
                    result[key] = measured
                }
            }
        } catch {
            if !options.has("--keep-data") { cleanup(context) }
            FileHandle.standardError.write(Data("pipeline: logs of the worker and the mock: \(context.logDirectory.path)\n".utf8))
            throw error
        }
        if let profile { result["profile_c\(profileAt)"] = profile }
        // The issue's targets, judged on this run.
        let measured = levels.compactMap { level -> (Int, Double)? in
            guard let entry = result["c\(level)"] as? [String: Any], entry["error"] == nil, let rps = entry["rps"] as? Double else { return nil }
            return (level, rps)
        }
        if let peak = measured.max(by: { $0.1 < $1.1 }) {
            result["peak_rps"] = peak.1
            result["peak_at"] = "c\(peak.0)"
        }
        var targets: [String: Any] = [:]
        if let c100 = result["c100"] as? [String: Any], let share = c100["pct_of_ideal"] as? Double {
            targets["c100_pct_of_ideal_ge_95"] = ["value": share, "met": share >= 95]
        }
        if let peak = result["peak_rps"] as? Double {
            targets["peak_rps_ge_4000"] = ["value": peak, "met": peak >= 4_000]
        }
        result["targets"] = targets
        if !options.has("--keep-data") { cleanup(context) }

        table.notes.insert(
            contentsOf: [
                "ideal = concurrency ÷ mock latency; p50/p99 = enqueue → result published after the Postgres commit (sampled)",
                "µs/job = CPU (utime+stime) of each process over the window ÷ jobs validated in it; machine busy = all cores",
            ], at: 0)
        if let peak = result["peak_rps"] as? Double {
            var line = "peak \(Format.rate(peak)) validations/s at \(result["peak_at"] ?? "?") (target ≥ 4000: \(peak >= 4_000 ? "met" : "not met"))"
            if let share = (result["c100"] as? [String: Any])?["pct_of_ideal"] as? Double {
                line += "; c100 at \(Format.micros(share))% of ideal (target ≥ 95%: \(share >= 95 ? "met" : "not met"))"
            }
            table.notes.append(line)
        }
        print(table.render())
        for detail in details { print(detail) }
        if let perf = profile?["perf"] as? [String: Any] {
            for note in PerfProfile.notes(perf, title: "worker, Postgres, Redis and mock at c\(profileAt)") { print(note) }
        }
        // The worker's and the mock's logs are kept only when the row fails.
        context.mock?.stop()
        try? FileManager.default.removeItem(at: context.logDirectory)
        return result
    }

    // MARK: - Setup

    static func locateReceiptq(_ explicit: String?) throws -> URL {
        let url: URL
        if let explicit {
            url = URL(fileURLWithPath: explicit)
        } else {
            let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            url = me.deletingLastPathComponent().appendingPathComponent("receiptq")
        }
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw BenchFailure(description: "\(url.path) not found: swift build -c release --product receiptq (scripts/bench does it)")
        }
        return url
    }

    /// fsync and synchronous_commit as this session sees them; throws when fsync is off (unless allowed).
    static func checkDurability(_ postgres: PostgresConnection, allowFsyncOff: Bool) throws -> [String: Any] {
        func show(_ setting: String) throws -> String {
            try postgres.query(PostgresQuery(unsafeSQL: "SHOW \(setting)")).rows.first?[0] ?? "?"
        }
        let fsync = try show("fsync")
        let durability: [String: Any] = [
            "fsync": fsync, "synchronous_commit": try show("synchronous_commit"),
            "full_page_writes": try show("full_page_writes"), "wal_sync_method": try show("wal_sync_method"),
            "max_connections": Int(try show("max_connections")) ?? -1, "server_version": try show("server_version"),
            "worker_sessions": "PGOPTIONS=-c synchronous_commit=on",
        ]
        if fsync != "on" && !allowFsyncOff {
            throw BenchFailure(
                description: "Postgres has fsync = \(fsync) (started with RECEIPTQ_PG_FAST=1?): the pipeline must commit durably. "
                    + "Restart it with `scripts/services stop && scripts/services start`, or pass --allow-fsync-off")
        }
        return durability
    }

    static func startMock(_ context: Context) throws {
        let port = try Network.freePort()
        var environment = ProcessInfo.processInfo.environment
        environment["LOG_LEVEL"] = "warning"
        let mock = try ChildProcess(
            executable: context.receiptq,
            arguments: ["mock-appstore", "--host", "127.0.0.1", "--port", String(port), "--latency-ms", String(context.latencyMs)],
            environment: environment, label: "mock-appstore", logDirectory: context.logDirectory)
        context.mock = mock
        guard Network.waitForListener(port: port, timeout: 30) else {
            throw BenchFailure(description: "the mock App Store did not listen on \(port):\n\(mock.logTail())")
        }
        context.mockBase = "http://127.0.0.1:\(port)"
        // The mock checks the shared secret of a bundle once told it (21004 otherwise), as Apple does.
        let body = try JSONEncoder().encode(["bundle_id": Context.bundleID, "shared_secret": Context.sharedSecret])
        let response = try CurlEasy(options: CurlOptions()).perform(
            HTTPRequest(
                method: "POST", url: "\(context.mockBase)/mock/secrets", headers: [(name: "Content-Type", value: "application/json")],
                body: [UInt8](body)))
        guard response.status == 204 else { throw BenchFailure(description: "mock /mock/secrets answered \(response.status)") }
    }

    /// Removes the bench's rows (children first), so the database does not grow run after run.
    static func cleanup(_ context: Context) {
        for app in context.apps { BenchApps.delete(app, on: context.postgres, row: "pipeline") }
        context.apps = []
    }

    // MARK: - One level

    struct Snapshot {
        var date = Date()
        var mono = BenchClock.wall()
        var worker: Double?
        var workerMemory: ProcessStats.Memory?
        var workerSwitches: (voluntary: Int, involuntary: Int)?
        var mock: Double?
        var bench = ProcessStats.selfCPUMicros()
        var redis: RedisStats
        var postgres: PostgresStats
        var machine = MachineCPU.sample()
        var feeder: Feeder.Counters

        init(context: Context, worker: Int32, feeder: Feeder) throws {
            self.worker = ProcessStats.cpuMicros(pid: worker)
            workerMemory = ProcessStats.memory(pid: worker)
            workerSwitches = ProcessStats.contextSwitches(pid: worker)
            mock = context.mock.flatMap { ProcessStats.cpuMicros(pid: $0.pid) }
            redis = try RedisStats.sample(context.redis)
            postgres = try PostgresStats.sample(context.postgres, postmaster: context.postmaster)
            self.feeder = feeder.counters
        }
    }

    static func runLevel(_ concurrency: Int, context: Context, profile: Bool) throws -> [String: Any] {
        let ideal = Double(concurrency) * context.idealPerLane
        var level: [String: Any] = ["concurrency": concurrency, "ideal_rps": Format.json(ideal)]

        let app = try context.makeApp("c\(concurrency)")
        guard let receipt = context.receipt else { throw BenchFailure(description: "no receipt template") }
        let factory = try JobFactory(receipt: receipt, appID: app.id)
        let prefix = "{rqb-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, context.redis) }

        let worker = try ChildProcess(
            executable: context.receiptq, arguments: ["work"],
            environment: context.workerEnvironment(prefix: prefix, concurrency: concurrency), label: "worker-c\(concurrency)",
            logDirectory: context.logDirectory)
        var workerStopped = false
        defer { if !workerStopped { worker.stop(grace: 5) } }

        // Ready = the worker has its connections and has registered its heartbeat.
        let started = Date()
        let readyBy = started.addingTimeInterval(30)
        var registered = 0
        while Date() < readyBy, worker.isRunning {
            registered = try context.redis.send(["SCARD", keys.workers]).int ?? 0
            if registered >= 1 { break }
            usleep(100_000)
        }
        guard worker.isRunning else { throw BenchFailure(description: "receiptq work exited:\n\(worker.logTail())") }
        level["startup_s"] = Format.json(Date().timeIntervalSince(started), places: 100)
        if registered < 1 {
            level["error"] = "worker did not start"
            level["detail"] =
                "no heartbeat within \(Int(readyBy.timeIntervalSince(started))) s; fetch errors logged: \(worker.logCount("Worker fetch error"))"
            FileHandle.standardError.write(Data("pipeline: c\(concurrency): \(level["detail"] ?? "")\n".utf8))
        }

        let feederRedis = try RedisConnection(configuration: context.configuration.redis, label: "bench-feeder")
        let watcherRedis = try RedisConnection(configuration: context.configuration.redis, label: "bench-watcher")
        defer {
            feederRedis.close()
            watcherRedis.close()
        }
        let watcher = ResultWatcher(redis: watcherRedis, keys: keys)
        // Backlog: ~4 ms of ideal throughput (at least 4 jobs); sample ~200 jobs per second for latency.
        let settings = Feeder.Settings(
            backlog: max(4, Int(ideal * 0.004)), maxBatch: 500, pollMicros: 1_000, sampleEvery: max(1, Int(ideal / 200)))
        let feeder = Feeder(
            redis: feederRedis, keys: keys, factory: factory, firstSerial: context.serial, settings: settings, watcher: watcher)
        try watcher.start()
        feeder.start()
        var feederStopped = false
        var watcherStopped = false
        defer {
            if !feederStopped { context.serial = feeder.stop() }
            if !watcherStopped { _ = watcher.stop() }
        }

        pause(seconds: context.warmup)
        if context.analyzeAfterWarmup {
            try context.postgres.execute("ANALYZE receipts, in_app_purchases, validation_attempts")
            level["analyzed_after_warmup"] = true
        }
        let before = try Snapshot(context: context, worker: worker.pid, feeder: feeder)
        pause(seconds: context.seconds)
        let after = try Snapshot(context: context, worker: worker.pid, feeder: feeder)
        if profile {
            // Every process of the pipeline at once, split by process name: "-qos.overcommit" are
            // the worker's lanes (Dispatch threads), "postgres" its backends, "NIO-ELT-…" the mock.
            FileHandle.standardError.write(Data("pipeline: perf record of worker, Postgres, Redis and mock (after the window)…\n".utf8))
            var pids = [worker.pid]
            if let mock = context.mock?.pid { pids.append(mock) }
            if let redis = after.redis.processID,
                ((try? String(contentsOfFile: "/proc/\(redis)/comm", encoding: .utf8)) ?? "").hasPrefix("redis")
            {
                pids.append(redis)
            }
            pids += after.postgres.family.keys.sorted()
            level["perf"] = PerfProfile.record(pids: pids, seconds: 6, directory: context.logDirectory)
        }
        context.serial = feeder.stop()
        feederStopped = true
        let pushed = feeder.counters.pushed

        // Drain: every pushed job must end up in Postgres.
        let drainBy = Date().addingTimeInterval(60)
        var stored = 0
        var valid = 0
        repeat {
            let counts = try context.postgres.query(
                "SELECT count(*) AS n, count(*) FILTER (WHERE status = 'valid') AS valid FROM receipts WHERE app_id = \(app.id)"
            ).rows.first
            stored = counts?.int("n") ?? 0
            valid = counts?.int("valid") ?? 0
            if stored >= pushed { break }
            usleep(200_000)
        } while Date() < drainBy
        let watched = watcher.stop()
        watcherStopped = true
        let exit = worker.stop()
        workerStopped = true
        let dead = try context.redis.send(["ZCARD", keys.dead]).int ?? -1
        let retry = try context.redis.send(["ZCARD", keys.retry]).int ?? -1
        let queued = try context.redis.send(["LLEN", keys.queue("validate")]).int ?? -1

        // Throughput and latency from Postgres.
        let window = after.date.timeIntervalSince(before.date)
        let jobs =
            try context.postgres.query(
                """
                SELECT count(*) AS n FROM receipts
                WHERE app_id = \(app.id) AND validated_at >= \(before.date) AND validated_at < \(after.date)
                """
            ).rows.first?.int("n") ?? 0
        let rps = Double(jobs) / window
        let validated = try context.postgres.query(
            """
            SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) AS p99,
                   avg(ms) AS mean, count(*) AS n
            FROM (SELECT extract(epoch FROM validated_at - created_at) * 1000 AS ms FROM receipts
                  WHERE app_id = \(app.id) AND created_at >= \(before.date) AND created_at < \(after.date)) s
            """
        ).rows.first
        let apple = try context.postgres.query(
            """
            SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY a.latency_ms) AS p50,
                   percentile_disc(0.99) WITHIN GROUP (ORDER BY a.latency_ms) AS p99, count(*) AS calls
            FROM validation_attempts a JOIN receipts r ON r.id = a.receipt_id
            WHERE r.app_id = \(app.id) AND r.validated_at >= \(before.date) AND r.validated_at < \(after.date)
            """
        ).rows.first
        let inWindow = watched.observations.filter { $0.pushedAt >= before.mono && $0.pushedAt < after.mono }
        let done = Distribution(nanoseconds: inWindow.map(\.latency))

        // CPU per job, per process.
        let perJob = Double(max(jobs, 1))
        func perJobMicros(_ delta: Double?) -> Double { delta.map { $0 / perJob } ?? .nan }
        let workerCPU = perJobMicros(after.worker.flatMap { a in before.worker.map { a - $0 } })
        let mockCPU = perJobMicros(after.mock.flatMap { a in before.mock.map { a - $0 } })
        let postgresCPU =
            context.postmaster == nil ? .nan : ProcessStats.familyDelta(before.postgres.family, after.postgres.family) / perJob
        let redisCPU = (after.redis.cpuSeconds - before.redis.cpuSeconds) * 1_000_000 / perJob
        let redisChildCPU = (after.redis.childCPUSeconds - before.redis.childCPUSeconds) * 1_000_000 / perJob
        let benchCPU = (after.bench - before.bench) / perJob
        let machine = MachineCPU.shares(before.machine, after.machine)
        let windowMicros = window * 1_000_000
        // What the whole pipeline costs per job, and the rate the machine's cores could carry at that cost.
        let totalCPU = [workerCPU, postgresCPU, redisCPU, redisChildCPU, mockCPU, benchCPU].filter(\.isFinite).reduce(0, +)
        let coreCount = Double(ProcessInfo.processInfo.activeProcessorCount)
        func cores(_ microsPerJob: Double) -> Double { Format.json(microsPerJob * perJob / windowMicros, places: 100) }

        // Redis: commands per job; a lane's round trips are BLMOVE, the circuit's EVALSHAs and one
        // MULTI…EXEC pipeline per acknowledgement.
        let calls = RedisStats.callDelta(before.redis, after.redis)
        let laneCommands = ["blmove", "evalsha", "multi", "lpush", "expire", "del", "lrem", "exec", "sadd", "hset"]
        var redisPerJob: [String: Any] = [:]
        for (name, count) in calls { redisPerJob[name] = Format.json(count / perJob, places: 1_000) }
        let roundTrips = ((calls["blmove"] ?? 0) + (calls["evalsha"] ?? 0) + (calls["exec"] ?? 0)) / perJob
        let laneCommandCount = laneCommands.reduce(0) { $0 + (calls[$1] ?? 0) } / perJob
        let postgresDelta = PostgresStats.delta(before.postgres, after.postgres)
        var postgresPerJob: [String: Any] = [:]
        var indexReads: [String: Any] = [:]
        for (name, value) in postgresDelta {
            if name.hasPrefix("idx_tup_read:") {
                if value > 0 { indexReads[String(name.dropFirst("idx_tup_read:".count))] = Format.json(value / perJob, places: 100) }
            } else {
                postgresPerJob[name] = Format.json(value / perJob, places: 1_000)
            }
        }
        postgresPerJob["index_tuples_read"] = indexReads
        postgresPerJob["statements_per_job_from_code"] = 8
        postgresPerJob["statements"] =
            "BEGIN; INSERT receipts; INSERT in_app_purchases ×2; INSERT validation_attempts; SELECT receipt; SELECT purchases; COMMIT"
        let feederWindow = (
            polls: after.feeder.polls - before.feeder.polls, length: after.feeder.queueLengthSum - before.feeder.queueLengthSum,
            empty: after.feeder.emptyPolls - before.feeder.emptyPolls
        )
        let meanQueue = feederWindow.polls > 0 ? Double(feederWindow.length) / Double(feederWindow.polls) : .nan

        level.merge(
            [
                "rps": Format.json(rps),
                "pct_of_ideal": Format.json(100 * rps / ideal),
                "p50_ms": Format.json(done.p50 / 1_000, places: 100),
                "p99_ms": Format.json(done.p99 / 1_000, places: 100),
                "latency_samples": done.count,
                "latency_samples_unseen": watched.unseen,
                "validated_p50_ms": Format.json(validated?.double("p50") ?? .nan, places: 100),
                "validated_p99_ms": Format.json(validated?.double("p99") ?? .nan, places: 100),
                "apple_call_p50_ms": apple?.int("p50") ?? -1,
                "apple_call_p99_ms": apple?.int("p99") ?? -1,
                "cpu_us_per_job": Format.json(workerCPU),
                "rss_mb": Format.json(Double(after.workerMemory?.hwmKiB ?? 0) / 1_024),
                "rss_now_mb": Format.json(Double(after.workerMemory?.rssKiB ?? 0) / 1_024),
                "worker_threads": after.workerMemory?.threads ?? -1,
                "worker_context_switches_per_job": [
                    "voluntary": Format.json(
                        Double((after.workerSwitches?.voluntary ?? 0) - (before.workerSwitches?.voluntary ?? 0)) / perJob, places: 100),
                    "involuntary": Format.json(
                        Double((after.workerSwitches?.involuntary ?? 0) - (before.workerSwitches?.involuntary ?? 0)) / perJob, places: 100),
                ],
                "jobs_in_window": jobs,
                "window_s": Format.json(window, places: 100),
                "cpu_us_per_job_by_process": [
                    "worker": Format.json(workerCPU), "postgres": Format.json(postgresCPU), "redis": Format.json(redisCPU),
                    "redis_children": Format.json(redisChildCPU), "mock_appstore": Format.json(mockCPU),
                    "bench": Format.json(benchCPU),
                ],
                "cpu_us_per_job_total": Format.json(totalCPU),
                "cpu_ceiling_rps": Format.json(coreCount * 1_000_000 / totalCPU),
                "cores_used": [
                    "worker": cores(workerCPU), "postgres": cores(postgresCPU), "redis": cores(redisCPU),
                    "mock_appstore": cores(mockCPU), "bench": cores(benchCPU),
                ],
                "machine_cpu_pct": [
                    "busy": Format.json(machine.busy), "iowait": Format.json(machine.iowait), "steal": Format.json(machine.steal),
                ],
                "redis_per_job": [
                    "round_trips_of_a_lane": Format.json(roundTrips, places: 100),
                    "lane_commands": Format.json(laneCommandCount, places: 100),
                    "commands": redisPerJob,
                    "net_in_bytes": Format.json((after.redis.netInputBytes - before.redis.netInputBytes) / perJob, places: 1),
                    "net_out_bytes": Format.json((after.redis.netOutputBytes - before.redis.netOutputBytes) / perJob, places: 1),
                ],
                "postgres_per_job": postgresPerJob,
                "queue": [
                    "backlog_target": settings.backlog, "mean_length": Format.json(meanQueue, places: 100),
                    "empty_polls_pct": Format.json(feederWindow.polls > 0 ? 100 * Double(feederWindow.empty) / Double(feederWindow.polls) : .nan),
                    "mean_wait_ms": Format.json(rps > 0 ? 1_000 * meanQueue / rps : .nan, places: 100),
                ],
                "durable": [
                    "jobs_pushed": pushed, "receipts_stored": stored, "receipts_valid": valid, "dead": dead, "retry": retry,
                    "left_in_queue": queued, "all_stored": stored == pushed && valid == pushed,
                ],
                "worker_exit": exit.map { Int($0) } ?? -9,
            ]
        ) { _, new in new }
        if let error = after.feeder.firstError { level["feeder_error"] = error }
        if stored != pushed || valid != pushed {
            FileHandle.standardError.write(
                Data("pipeline: c\(concurrency): \(pushed) pushed, \(stored) stored, \(valid) valid (dead \(dead), retry \(retry))\n".utf8))
            FileHandle.standardError.write(Data((worker.logTail() + "\n").utf8))
        }
        return level
    }

    // MARK: - Output

    static func tableRow(_ key: String, _ level: [String: Any]) -> [String] {
        func value(_ name: String) -> Double { (level[name] as? Double) ?? (level[name] as? Int).map(Double.init) ?? .nan }
        guard level["rps"] != nil else {
            return [key, "-", "error", Format.rate(value("ideal_rps")), "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"]
        }
        let byProcess = level["cpu_us_per_job_by_process"] as? [String: Double] ?? [:]
        let machine = level["machine_cpu_pct"] as? [String: Double] ?? [:]
        return [
            key, "\(level["worker_threads"] ?? "?")", Format.rate(value("rps")), Format.rate(value("ideal_rps")),
            Format.micros(value("pct_of_ideal")), Format.micros(value("p50_ms")), Format.micros(value("p99_ms")),
            Format.micros(value("cpu_us_per_job")), Format.micros(value("rss_mb")), Format.micros(byProcess["postgres"] ?? .nan),
            Format.micros(byProcess["redis"] ?? .nan), Format.micros(byProcess["mock_appstore"] ?? .nan),
            Format.micros(byProcess["bench"] ?? .nan), Format.micros(machine["busy"] ?? .nan),
        ]
    }

    static func indexSummary(_ value: Any?) -> String {
        guard let reads = value as? [String: Double], !reads.isEmpty else { return "-" }
        return reads.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }

    static func levelDetail(_ key: String, _ level: [String: Any]) -> String {
        let redis = level["redis_per_job"] as? [String: Any] ?? [:]
        let postgres = level["postgres_per_job"] as? [String: Any] ?? [:]
        let queue = level["queue"] as? [String: Any] ?? [:]
        let machine = level["machine_cpu_pct"] as? [String: Double] ?? [:]
        let durable = level["durable"] as? [String: Any] ?? [:]
        let cores = level["cores_used"] as? [String: Double] ?? [:]
        let switches = level["worker_context_switches_per_job"] as? [String: Double] ?? [:]
        func number(_ value: Any?) -> String { value.map { "\($0)" } ?? "?" }
        return """
              \(key): \(number(level["jobs_in_window"])) jobs in \(number(level["window_s"])) s; validated_at − enqueued p50/p99 \
            \(number(level["validated_p50_ms"]))/\(number(level["validated_p99_ms"])) ms; App Store call p50/p99 \
            \(number(level["apple_call_p50_ms"]))/\(number(level["apple_call_p99_ms"])) ms; queue mean \(number(queue["mean_length"])) \
            jobs (≈ \(number(queue["mean_wait_ms"])) ms wait, \(number(queue["empty_polls_pct"]))% empty polls)
                per job: Redis \(number(redis["round_trips_of_a_lane"])) lane round trips, \(number(redis["lane_commands"])) lane \
            commands, \(number(redis["net_in_bytes"])) B in; Postgres \(number(postgres["xact_commit"])) commits, \
            \(number(postgres["tup_inserted"])) rows inserted, \(number(postgres["wal_sync"])) WAL fsyncs, \(number(postgres["wal_bytes"])) WAL bytes
                Postgres index tuples read per job: \(indexSummary(postgres["index_tuples_read"]))
                CPU: \(number(level["cpu_us_per_job_total"])) µs per job in all processes → at most \(number(level["cpu_ceiling_rps"])) jobs/s \
            on this machine's cores
                cores: worker \(number(cores["worker"])), postgres \(number(cores["postgres"])), redis \(number(cores["redis"])), \
            mock \(number(cores["mock_appstore"])), bench \(number(cores["bench"])); machine busy \(number(machine["busy"]))%, \
            iowait \(number(machine["iowait"]))%, steal \(number(machine["steal"]))%; worker threads \(number(level["worker_threads"])), \
            context switches/job \(number(switches["voluntary"])) voluntary + \(number(switches["involuntary"])) involuntary; \
            durable: \(number(durable["receipts_valid"]))/\(number(durable["jobs_pushed"])) valid in Postgres
            """
    }
}

/// `perf record` of running processes, summarised by shared object (and process) and by symbol.
enum PerfProfile {
    static func record(pids: [Int32], seconds: Int, directory: URL) -> [String: Any] {
        guard let perf = ChildProcess.which("perf") else { return ["error": "perf not installed"] }
        let data = directory.appendingPathComponent("perf-\(pids.first ?? 0).data").path
        let recorded = ChildProcess.run(
            perf, ["record", "-F", "999", "-p", pids.map(String.init).joined(separator: ","), "-o", data, "--", "sleep", String(seconds)])
        guard recorded.status == 0 else { return ["error": "perf record failed: \(recorded.output.suffix(300))"] }
        defer { try? FileManager.default.removeItem(atPath: data) }
        var result: [String: Any] = ["seconds": seconds, "frequency_hz": 999]
        // With several processes, split by process too: "comm / dso".
        let keys = pids.count > 1 ? ["comm", "dso"] : ["dso"]
        let byDSO = ChildProcess.run(perf, ["report", "-i", data, "--stdio", "--no-children", "--sort", keys.joined(separator: ",")])
        var samples = 0
        var shares: [String: Double] = [:]
        for line in byDSO.output.split(separator: "\n") {
            if line.hasPrefix("# Samples:") {
                // "# Samples: 4K of event 'cpu-clock:ppp'" or an exact count.
                let token = line.split(separator: " ").dropFirst(2).first.map(String.init) ?? ""
                samples = token.hasSuffix("K") ? Int((Double(token.dropLast()) ?? 0) * 1_000) : Int(token) ?? 0
            }
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count > keys.count, parts[0].hasSuffix("%"), let share = Double(parts[0].dropLast()) else { continue }
            shares[parts[1...keys.count].joined(separator: " / "), default: 0] += share
        }
        result["samples"] = samples
        result["by_dso_pct"] = shares
        let bySymbol = ChildProcess.run(
            perf,
            ["report", "-i", data, "--stdio", "--no-children", "--sort", (keys + ["sym"]).joined(separator: ","), "-q", "--percent-limit", "0.5"])
        var symbols: [(share: Double, dso: String, symbol: String)] = []
        for line in bySymbol.output.split(separator: "\n") {
            // "  4.20%  comm  dso  [.] symbol": the keys, the [.]/[k] marker, then the symbol (may hold spaces).
            let parts = line.split(separator: " ", maxSplits: keys.count + 2, omittingEmptySubsequences: true)
            guard parts.count == keys.count + 3, parts[0].hasSuffix("%"), let share = Double(parts[0].dropLast()) else { continue }
            symbols.append(
                (share, parts[1...keys.count].joined(separator: " / "), String(parts[keys.count + 2]).trimmingCharacters(in: .whitespaces)))
        }
        let demangled = demangle(symbols.map(\.symbol))
        result["top_symbols"] = zip(symbols, demangled).prefix(40).map { item, name in
            ["pct": item.share, "dso": item.dso, "symbol": String(name.prefix(160))] as [String: Any]
        }
        return result
    }

    /// Swift symbols made readable with swift-demangle (others returned as they are).
    static func demangle(_ symbols: [String]) -> [String] {
        guard let tool = ChildProcess.which("swift-demangle") else { return symbols }
        return symbols.map { symbol in
            guard symbol.hasPrefix("$s") || symbol.hasPrefix("_$s") else { return symbol }
            let output = ChildProcess.run(tool, ["--simplified", "--compact", symbol], timeout: 10).output
            let line = output.trimmingCharacters(in: .whitespacesAndNewlines)
            return line.isEmpty ? symbol : line
        }
    }

    /// Notes for a table: the biggest shares by object, then the top symbols.
    static func notes(_ perf: [String: Any], title: String, symbols count: Int = 25) -> [String] {
        if let error = perf["error"] { return ["perf: \(error)"] }
        var notes: [String] = []
        if let shares = perf["by_dso_pct"] as? [String: Double] {
            let top = shares.sorted { $0.value > $1.value }.prefix(16).map { "\($0.key) \(String(format: "%.1f", $0.value))%" }
            notes.append("perf of \(title) (\(perf["samples"] ?? "?") samples), by object: " + top.joined(separator: ", "))
        }
        if let symbols = perf["top_symbols"] as? [[String: Any]] {
            notes.append("perf top symbols:")
            for symbol in symbols.prefix(count) {
                notes.append("  \(symbol["pct"] ?? "?")%  \(symbol["dso"] ?? "?")  \(symbol["symbol"] ?? "?")")
            }
        }
        return notes
    }
}
