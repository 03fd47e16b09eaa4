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
/// `/proc/<pid>`. With `--processes` a level runs several such processes on the same prefix (one
/// queue, as replicas share it in production). The App Store is `receiptq mock-appstore
/// --latency-ms 50`, another process, whose CPU is reported too (it must not be the bottleneck).
/// Postgres runs with `fsync = on` (checked; the row refuses otherwise) and every worker session
/// gets `synchronous_commit = on` (PGOPTIONS).
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
/// - **cpu_us_per_job / rss_mb**: the worker processes' utime+stime over the window ÷ jobs; VmHWM;
/// - per job, from server counters: Redis commands and round trips, Postgres commits, tuples and
///   WAL fsyncs, and the CPU of Postgres, Redis, the mock and the bench; the cores each used, and
///   what the rest of the machine used meanwhile (`other`);
/// - whether the feeder kept the queue filled (else the feeder, not receiptq, set the rate).
///
/// `--iterations K` measures every level K times, round-robin over the levels, and reports the
/// medians; `--quiet-load L` waits before each level until the 1-minute load average is below L
/// (the machine is shared). At one concurrency (`--profile-at`, 100) the row also profiles: `perf
/// record` of the worker, Postgres, Redis and the mock for a few seconds after the window.
enum PipelineRow: BenchRow {
    static let name = "pipeline"
    static let summary =
        "receiptq work (own process) → mock App Store (50 ms) → Postgres (fsync on): validations/s, latency, CPU/job at N lanes"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    /// The peer the levels are compared with (`PipelineRow+Peer.swift`).
    static let packages = ["ruby-sidekiq", "ruby-pg"]
    static let defaultIterations = 1
    static let options = [
        OptionSpec(name: "--concurrency", takesValue: true, help: "WORKER_CONCURRENCY of each process, comma-separated (default 25,100,400,1000)"),
        OptionSpec(
            name: "--processes", takesValue: true,
            help: "receiptq work processes sharing the queue, comma-separated; each runs at every concurrency (default 1)"),
        OptionSpec(name: "--latency-ms", takesValue: true, help: "the mock App Store's latency (default 50)"),
        OptionSpec(
            name: "--server-api-concurrency", takesValue: true,
            help: "also run StoreKit 2 jobs through the Server API at these concurrencies (pipeline: 100; 0 = none)"),
        OptionSpec(
            name: "--server-api-apps", takesValue: true,
            help: "apps the server_api jobs are spread over (default 40; Apple allows 50 calls/s per app)"),
        OptionSpec(name: "--warmup-seconds", takesValue: true, help: "load before the window (default 4)"),
        OptionSpec(name: "--seconds", takesValue: true, help: "the measured window (default 12)"),
        OptionSpec(
            name: "--quiet-load", takesValue: true, help: "before each level, wait until the 1-minute load average is below this (default 0: no wait)"
        ),
        OptionSpec(name: "--quiet-wait-seconds", takesValue: true, help: "the longest such wait, then run anyway and record the load (default 900)"),
        OptionSpec(name: "--profile-at", takesValue: true, help: "profile at this concurrency with perf (default 100; 0 = none)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
        OptionSpec(name: "--allow-fsync-off", takesValue: false, help: "run even if Postgres has fsync off (results marked not durable)"),
        OptionSpec(name: "--keep-data", takesValue: false, help: "keep the bench's apps and receipts in Postgres"),
        OptionSpec(
            name: "--analyze-after-warmup", takesValue: false,
            help: "ANALYZE the tables a validation writes after each warm-up (the default; kept so older command lines run)"),
        OptionSpec(name: "--no-peer", takesValue: false, help: "skip the peer_sidekiq comparison run after the levels"),
        OptionSpec(
            name: "--no-analyze-after-warmup", takesValue: false,
            help: "keep whatever statistics the tables had (shows how plans made on emptied tables age as they refill)"),
    ]

    /// What a run measures when its options do not say: `pipeline` sweeps the concurrency of one
    /// process, `pipeline_scale` the number of processes at one concurrency.
    struct Defaults {
        var row: String
        var concurrencies: String
        var processes: String
        /// Runs per level when `--iterations` does not say.
        var iterations: Int
        var quietLoad: Double
        var profileAt: Int
        /// Concurrencies of the server_api levels (comma-separated; "0" = none).
        var serverAPIConcurrencies = "0"
        /// Name every level `p<processes>_c<concurrency>`, even with one process (else `c<concurrency>`
        /// for one process, as the row always named them).
        var alwaysNameProcesses: Bool

        static let pipeline = Defaults(
            row: "pipeline", concurrencies: "25,100,400,1000", processes: "1", iterations: PipelineRow.defaultIterations, quietLoad: 0,
            profileAt: 100, serverAPIConcurrencies: "100", alwaysNameProcesses: false)
    }

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
        var quietLoad = 0.0
        var quietWait = 900.0
        var label = "pipeline"
        var mock: ChildProcess?
        var mockBase = ""
        var receipt: JobFactory.ReceiptTemplate?
        var serverAPI: ServerAPISetup?
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
        func makeApp(_ label: String, bundleID: String = Context.bundleID) throws -> AppRecord {
            let (app, _) = try AppAdmin(connection: postgres).addApp(
                name: "bench-\(label)-\(UUID().uuidString.prefix(8).lowercased())", bundleID: bundleID,
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

    /// One level of a run: `processes` worker processes at `concurrency` each.
    struct Level {
        var processes: Int
        var concurrency: Int
        var key: String
        /// StoreKit 2 jobs through the Server API (two calls each) instead of receipts through verifyReceipt.
        var serverAPI = false
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] { try run(options, defaults: .pipeline) }

    static func run(_ options: BenchOptions, defaults: Defaults) throws -> [String: Any] {
        func number(_ name: String, _ fallback: Double) throws -> Double {
            guard let text = options.extra[name] else { return fallback }
            guard let value = Double(text), value >= 0 else { throw BenchFailure(description: "\(name) needs a number, not \(text)") }
            return value
        }
        let concurrencies = try options.positiveList("--concurrency", default: defaults.concurrencies)
        let serverAPIConcurrencies = try (options.extra["--server-api-concurrency"] ?? defaults.serverAPIConcurrencies)
            .split(separator: ",").map { text -> Int in
                guard let value = Int(text.trimmingCharacters(in: .whitespaces)), value >= 0 else {
                    throw BenchFailure(description: "--server-api-concurrency needs whole numbers, not \(text)")
                }
                return value
            }.filter { $0 > 0 }
        let processCounts = try options.positiveList("--processes", default: defaults.processes)
        let nameProcesses = defaults.alwaysNameProcesses || processCounts != [1]
        let levels =
            concurrencies.flatMap { concurrency in
                processCounts.map { processes in
                    Level(
                        processes: processes, concurrency: concurrency,
                        key: nameProcesses ? "p\(processes)_c\(concurrency)" : "c\(concurrency)")
                }
            }
            + serverAPIConcurrencies.map { Level(processes: 1, concurrency: $0, key: "server_api_c\($0)", serverAPI: true) }
        let runs = options.iterations(default: defaults.iterations)
        let latencyMs = Int(try number("--latency-ms", 50))
        let profileAt = Int(try number("--profile-at", Double(defaults.profileAt)))
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
        // Every level measures plans made for tables holding its warm-up, not the ones an earlier
        // row's cleanup left (nearly empty: scans that the level's own growth makes slower by the
        // second — Postgres CPU per job 1.6 → 7.7 ms within one run of the outbox row).
        context.analyzeAfterWarmup = !options.has("--no-analyze-after-warmup")
        context.quietLoad = try number("--quiet-load", defaults.quietLoad)
        context.quietWait = try number("--quiet-wait-seconds", 900)
        context.label = defaults.row
        defer { context.mock?.stop() }
        if !serverAPIConcurrencies.isEmpty {
            context.serverAPI = try prepareServerAPI(context, apps: min(1_000, max(1, Int(try number("--server-api-apps", 40)))))
        }
        try startMock(context)
        FileHandle.standardError.write(Data("\(defaults.row): forging the receipt template…\n".utf8))
        context.receipt = try JobFactory.forgeReceipt(bundleID: Context.bundleID)

        var result: [String: Any] = [
            "worker": "receiptq work (separate processes, release; --processes of them share one queue), each WORKER_CONCURRENCY in flight",
            "receiptq": receiptq.path,
            "mock_latency_ms": latencyMs,
            "durability": durability,
            "warmup_s": context.warmup,
            "window_s": context.seconds,
            "runs_per_level": runs,
            "quiet_load": ["below": context.quietLoad, "max_wait_s": context.quietWait],
            "method": [
                "rps": "receipts with validated_at in the window / window length (Postgres)",
                "p50_ms/p99_ms": "enqueue → result published in Redis after commit + ack (BLPOP on a ~200/s sample of result keys)",
                "stages_ms":
                    "the workers' receiptq_job_stage_seconds over the window: call = reserved → answered (http: libcurl's time for Apple's calls), commit_wait, commit, settle",
                "validated_ms": "validated_at − enqueued_at of every job enqueued in the window (Postgres; excludes commit + ack)",
                "cpu_us_per_job": "utime+stime of all worker processes over the window / jobs validated in the window",
                "cores_used": "CPU seconds per second of wall time over the window, per process group; other = the machine's busy time minus ours",
                "rss_mb": "largest worker VmHWM (peak RSS) at the end of the window",
                "feeder_kept_up": "the queue was empty on ≤ 10 % of the feeder's polls and held ≥ half its backlog target on average",
                "medians": "with --iterations > 1 every level runs that many times (round-robin over levels); the level's rps, p50_ms, "
                    + "p99_ms, cpu_us_per_job_total and cores_used are medians over its runs, runs[] lists each, median_run is the full "
                    + "detail of the run with the median rps",
            ],
        ]
        var table = TextTable(
            title: "\(defaults.row): receiptq work → mock App Store (\(latencyMs) ms) → Postgres (fsync \(durability["fsync"] ?? "?"), "
                + "synchronous_commit on); \(Format.json(context.warmup)) s warm-up, \(Format.json(context.seconds)) s window",
            headers: [
                "level", "run", "threads", "rps", "ideal", "% ideal", "p50 ms", "p99 ms", "worker µs/job", "rss MB", "pg µs/job",
                "redis µs/job", "mock µs/job", "bench µs/job", "machine busy %", "load 1m",
            ])
        var profile: [String: Any]?
        var details: [String] = []
        var measured: [String: [[String: Any]]] = [:]
        do {
            for run in 1...runs {
                for level in levels {
                    FileHandle.standardError.write(Data("\(defaults.row): \(level.key), run \(run) of \(runs)…\n".utf8))
                    let profiling = run == 1 && level.concurrency == profileAt && level.processes == processCounts[0]
                    var outcome = try runLevel(level, context: context, profile: profiling)
                    outcome["run"] = run
                    if profiling, let perf = outcome.removeValue(forKey: "perf") {
                        // The perf record of the separate processes belongs with the profile, not the level's numbers.
                        profile = ["perf": perf]
                    }
                    measured[level.key, default: []].append(outcome)
                    table.add(tableRow(level.key, outcome))
                    if let error = outcome["error"] as? String {
                        table.notes.append("\(level.key) run \(run): \(error): \(outcome["detail"] ?? "")")
                    } else {
                        details.append(levelDetail("\(level.key) run \(run)", outcome))
                    }
                }
            }
        } catch {
            if !options.has("--keep-data") { cleanup(context) }
            FileHandle.standardError.write(Data("\(defaults.row): logs of the workers and the mock: \(context.logDirectory.path)\n".utf8))
            throw error
        }
        for level in levels { result[level.key] = combine(measured[level.key] ?? []) }
        if let profile { result["profile_c\(profileAt)"] = profile }
        // The issue's targets, judged on this run.
        let rates = levels.filter { !$0.serverAPI }.compactMap { level -> (String, Double)? in
            guard let entry = result[level.key] as? [String: Any], entry["error"] == nil, let rps = entry["rps"] as? Double else { return nil }
            return (level.key, rps)
        }
        if let peak = rates.max(by: { $0.1 < $1.1 }) {
            result["peak_rps"] = peak.1
            result["peak_at"] = peak.0
        }
        var targets: [String: Any] = [:]
        if let c100 = result["c100"] as? [String: Any], let share = c100["pct_of_ideal"] as? Double {
            targets["c100_pct_of_ideal_ge_95"] = ["value": share, "met": share >= 95]
        }
        if let peak = result["peak_rps"] as? Double {
            targets["peak_rps_ge_4000"] = ["value": peak, "met": peak >= 4_000]
        }
        result["targets"] = targets
        if processCounts.count > 1 { result["scaling"] = scaling(levels: levels, result: result) }
        if !options.has("--keep-data") { cleanup(context) }
        // The pipeline row only (pipeline_scale measures scaling, not the peer): `--no-peer` skips it.
        let peer =
            defaults.row == name && !options.has("--no-peer")
            ? comparePeer(
                levels: levels, result: result, receiptq: receiptq, latencyMs: latencyMs, warmup: context.warmup, seconds: context.seconds)
            : nil
        if let peer { result["peer_sidekiq"] = peer.json }

        table.notes.insert(
            contentsOf: [
                "ideal = processes × concurrency ÷ mock latency; p50/p99 = enqueue → result published after the Postgres commit (sampled)",
                "µs/job = CPU (utime+stime) of each process group over the window ÷ jobs validated in it; machine busy = all cores",
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
        if runs > 1 || processCounts.count > 1 { print(coresTable(levels: levels, result: result, runs: runs).render()) }
        if let peer { print(peer.table.render()) }
        if let perf = profile?["perf"] as? [String: Any] {
            for note in PerfProfile.notes(perf, title: "workers, Postgres, Redis and mock at c\(profileAt)") { print(note) }
        }
        // The workers' and the mock's logs are kept only when the row fails.
        context.mock?.stop()
        try? FileManager.default.removeItem(at: context.logDirectory)
        return result
    }

    /// Waits until the 1-minute load average is below `context.quietLoad` (at most
    /// `context.quietWait` seconds); returns how long it waited and whether the machine got quiet.
    static func waitForQuiet(_ context: Context, key: String) -> (waited: Double, quiet: Bool) {
        guard context.quietLoad > 0 else { return (0, true) }
        let started = Date()
        var announced = false
        while true {
            let load = Machine.loadAverage().first ?? 0
            if load < context.quietLoad { return (Date().timeIntervalSince(started), true) }
            let waited = Date().timeIntervalSince(started)
            if waited >= context.quietWait {
                FileHandle.standardError.write(
                    Data("\(context.label): \(key): load \(load) after \(Int(waited)) s; running anyway (recorded)\n".utf8))
                return (waited, false)
            }
            if !announced {
                FileHandle.standardError.write(
                    Data("\(context.label): \(key): waiting for the 1-minute load (\(load)) to fall below \(context.quietLoad)…\n".utf8))
                announced = true
            }
            sleep(5)
        }
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
            arguments: ["mock-appstore", "--host", "127.0.0.1", "--port", String(port), "--latency-ms", String(context.latencyMs)]
                + (context.serverAPI.map { ["--jws-ca-directory", $0.jwsDirectory.path, "--synthesize-transactions"] } ?? []),
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
        BenchApps.delete(context.apps, on: context.postgres, row: "pipeline")
        context.apps = []
    }

    // MARK: - One level

    struct Snapshot {
        var date = Date()
        var mono = BenchClock.wall()
        /// CPU µs of each worker process (nil: that process is gone).
        var workers: [Double?]
        var workerMemory: [ProcessStats.Memory?]
        var workerSwitches: [(voluntary: Int, involuntary: Int)?]
        var mock: Double?
        var bench = ProcessStats.selfCPUMicros()
        var redis: RedisStats
        var postgres: PostgresStats
        var machine = MachineCPU.sample()
        var feeder: Feeder.Counters

        init(context: Context, workers pids: [Int32], feeder: Feeder) throws {
            workers = pids.map { ProcessStats.cpuMicros(pid: $0) }
            workerMemory = pids.map { ProcessStats.memory(pid: $0) }
            workerSwitches = pids.map { ProcessStats.contextSwitches(pid: $0) }
            mock = context.mock.flatMap { ProcessStats.cpuMicros(pid: $0.pid) }
            redis = try RedisStats.sample(context.redis)
            postgres = try PostgresStats.sample(context.postgres, postmaster: context.postmaster)
            self.feeder = feeder.counters
        }

        /// CPU µs all worker processes used since `before`; nil when one of them is gone.
        func workerCPU(since before: Snapshot) -> Double? {
            guard workers.count == before.workers.count else { return nil }
            var total = 0.0
            for (after, earlier) in zip(workers, before.workers) {
                guard let after, let earlier else { return nil }
                total += after - earlier
            }
            return total
        }

        /// Context switches of all worker processes since `before`.
        func workerSwitches(since before: Snapshot) -> (voluntary: Int, involuntary: Int) {
            zip(workerSwitches, before.workerSwitches).reduce((0, 0)) { sum, pair in
                (
                    sum.0 + (pair.0?.voluntary ?? 0) - (pair.1?.voluntary ?? 0),
                    sum.1 + (pair.0?.involuntary ?? 0) - (pair.1?.involuntary ?? 0)
                )
            }
        }
    }

    static func runLevel(_ spec: Level, context: Context, profile: Bool) throws -> [String: Any] {
        let concurrency = spec.concurrency
        let processes = spec.processes
        // A Server API job makes two calls (history, then statuses), each at the mock's latency.
        let ideal = Double(processes * concurrency) * context.idealPerLane / (spec.serverAPI ? 2 : 1)
        var level: [String: Any] = [
            "concurrency": concurrency, "processes": processes, "in_flight_max": processes * concurrency, "ideal_rps": Format.json(ideal),
        ]

        // The shared machine first: other people's builds would otherwise be measured with us.
        let quiet = waitForQuiet(context, key: spec.key)
        level["load_wait_s"] = Format.json(quiet.waited)
        level["load_quiet"] = quiet.quiet
        level["load_average_before"] = Machine.loadAverage()

        let label = spec.key.replacingOccurrences(of: "_", with: "-")
        let apps: [AppRecord]
        if spec.serverAPI {
            guard let setup = context.serverAPI else { throw BenchFailure(description: "no Server API setup") }
            apps = try makeServerAPIApps(context, setup, label: label)
            level["apps"] = apps.count
            level["apple_calls_per_job"] = 2
        } else {
            apps = [try context.makeApp(label)]
        }
        // The level's receipts, whichever apps they belong to.
        let scope = "{" + apps.map(\.id.uuidString).joined(separator: ",") + "}"
        guard let receipt = context.receipt else { throw BenchFailure(description: "no receipt template") }
        let factory = try JobFactory(receipt: receipt, appIDs: apps.map(\.id), transactionIDs: spec.serverAPI)
        let prefix = "{rqb-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, context.redis) }

        // Every process on the same prefix: one queue, as replicas share it in production.
        var workers: [ChildProcess] = []
        var workersStopped = false
        defer { if !workersStopped { for worker in workers { worker.stop(grace: 5) } } }
        // Each worker exports its stage histograms, read before and after the window.
        let metricsPorts = try (0..<processes).map { _ in try Network.freePort() }
        for index in 0..<processes {
            workers.append(
                try ChildProcess(
                    executable: context.receiptq, arguments: ["work"],
                    environment: context.workerEnvironment(prefix: prefix, concurrency: concurrency).merging(
                        (spec.serverAPI ? context.serverAPI.map { serverAPIEnvironment(context, $0) } ?? [:] : [:])
                            .merging(["METRICS_PORT": String(metricsPorts[index])]) { _, new in new }
                    ) { _, new in new },
                    label: "worker-\(spec.key)-\(index)", logDirectory: context.logDirectory))
        }
        let pids = workers.map(\.pid)

        // Ready = every worker has its connections and has registered its heartbeat.
        let started = Date()
        let readyBy = started.addingTimeInterval(30)
        var registered = 0
        while Date() < readyBy, workers.allSatisfy(\.isRunning) {
            registered = try context.redis.send(["SCARD", keys.workers]).int ?? 0
            if registered >= processes { break }
            usleep(100_000)
        }
        if let dead = workers.first(where: { !$0.isRunning }) {
            throw BenchFailure(description: "receiptq work exited:\n\(dead.logTail())")
        }
        level["startup_s"] = Format.json(Date().timeIntervalSince(started), places: 100)
        if registered < processes {
            level["error"] = "worker did not start"
            level["detail"] =
                "\(registered) of \(processes) heartbeats within \(Int(readyBy.timeIntervalSince(started))) s; fetch errors logged: "
                + "\(workers.reduce(0) { $0 + $1.logCount("Worker fetch error") })"
            FileHandle.standardError.write(Data("\(context.label): \(spec.key): \(level["detail"] ?? "")\n".utf8))
        }

        let feederRedis = try RedisConnection(configuration: context.configuration.redis, label: "bench-feeder")
        let watcherRedis = try RedisConnection(configuration: context.configuration.redis, label: "bench-watcher")
        defer {
            feederRedis.close()
            watcherRedis.close()
        }
        let watcher = ResultWatcher(redis: watcherRedis, keys: keys)
        // Backlog: ~4 ms of ideal throughput (at least 4 jobs), plus what each worker keeps reserved
        // ahead of its free slots (a quarter of its concurrency, at most 128), which it takes from
        // the queue as soon as it can; sample ~200 jobs per second for latency.
        let settings = Feeder.Settings(
            backlog: max(4, Int(ideal * 0.004)) + processes * max(1, min(128, concurrency / 4)), maxBatch: 500, pollMicros: 1_000,
            sampleEvery: max(1, Int(ideal / 200)))
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
            try context.postgres.execute("ANALYZE \(BenchApps.tables)")
            level["analyzed_after_warmup"] = true
        }
        let stagesBefore = WorkerStages.scrape(ports: metricsPorts, kind: "validate")
        let before = try Snapshot(context: context, workers: pids, feeder: feeder)
        pause(seconds: context.seconds)
        let after = try Snapshot(context: context, workers: pids, feeder: feeder)
        let stages = stagesBefore.flatMap { before in WorkerStages.scrape(ports: metricsPorts, kind: "validate")?.meanMs(since: before) }
        level["load_average_after"] = Machine.loadAverage()
        if profile {
            // Every process of the pipeline at once, split by process name: "-qos.overcommit" are
            // the worker's lanes (Dispatch threads), "postgres" its backends, "NIO-ELT-…" the mock.
            FileHandle.standardError.write(Data("\(context.label): perf record of workers, Postgres, Redis and mock (after the window)…\n".utf8))
            var perfPIDs = pids
            if let mock = context.mock?.pid { perfPIDs.append(mock) }
            if let redis = after.redis.processID,
                ((try? String(contentsOfFile: "/proc/\(redis)/comm", encoding: .utf8)) ?? "").hasPrefix("redis")
            {
                perfPIDs.append(redis)
            }
            perfPIDs += after.postgres.family.keys.sorted()
            level["perf"] = PerfProfile.record(pids: perfPIDs, seconds: 6, directory: context.logDirectory)
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
                "SELECT count(*) AS n, count(*) FILTER (WHERE status = 'valid') AS valid FROM receipts WHERE app_id = ANY(\(scope)::uuid[])"
            ).rows.first
            stored = counts?.int("n") ?? 0
            valid = counts?.int("valid") ?? 0
            if stored >= pushed { break }
            usleep(200_000)
        } while Date() < drainBy
        let watched = watcher.stop()
        watcherStopped = true
        let exits = workers.map { $0.stop() }
        workersStopped = true
        let dead = try context.redis.send(["ZCARD", keys.dead]).int ?? -1
        let retry = try context.redis.send(["ZCARD", keys.retry]).int ?? -1
        let queued = try context.redis.send(["LLEN", keys.queue("validate")]).int ?? -1

        // Throughput and latency from Postgres.
        let window = after.date.timeIntervalSince(before.date)
        let jobs =
            try context.postgres.query(
                """
                SELECT count(*) AS n FROM receipts
                WHERE app_id = ANY(\(scope)::uuid[]) AND validated_at >= \(before.date) AND validated_at < \(after.date)
                """
            ).rows.first?.int("n") ?? 0
        let rps = Double(jobs) / window
        let validated = try context.postgres.query(
            """
            SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) AS p99,
                   avg(ms) AS mean, count(*) AS n
            FROM (SELECT extract(epoch FROM validated_at - created_at) * 1000 AS ms FROM receipts
                  WHERE app_id = ANY(\(scope)::uuid[]) AND created_at >= \(before.date) AND created_at < \(after.date)) s
            """
        ).rows.first
        let apple = try context.postgres.query(
            """
            SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY a.latency_ms) AS p50,
                   percentile_disc(0.99) WITHIN GROUP (ORDER BY a.latency_ms) AS p99, count(*) AS calls
            FROM validation_attempts a JOIN receipts r ON r.id = a.receipt_id
            WHERE r.app_id = ANY(\(scope)::uuid[]) AND r.validated_at >= \(before.date) AND r.validated_at < \(after.date)
            """
        ).rows.first
        let inWindow = watched.observations.filter { $0.pushedAt >= before.mono && $0.pushedAt < after.mono }
        let done = Distribution(nanoseconds: inWindow.map(\.latency))

        // CPU per job, per process.
        let perJob = Double(max(jobs, 1))
        func perJobMicros(_ delta: Double?) -> Double { delta.map { $0 / perJob } ?? .nan }
        let workerCPU = perJobMicros(after.workerCPU(since: before))
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
        // The machine's busy cores that none of our processes account for: other people's work.
        let oursCores = totalCPU * perJob / windowMicros
        let otherCores = machine.busy.isFinite ? max(0, machine.busy / 100 * coreCount - oursCores) : .nan
        let switches = after.workerSwitches(since: before)
        let memories = after.workerMemory.compactMap { $0 }

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
        let emptyPollsPct = feederWindow.polls > 0 ? 100 * Double(feederWindow.empty) / Double(feederWindow.polls) : .nan
        // The feeder sets the rate when the workers find the queue empty: then receiptq was not measured.
        let feederKeptUp = emptyPollsPct <= 10 && meanQueue >= 0.5 * Double(settings.backlog)
        let feederBusyPct = 100 * Double(after.feeder.busyNanos &- before.feeder.busyNanos) / (window * 1e9)
        let feederCPUPct = 100 * Double(after.feeder.cpuNanos &- before.feeder.cpuNanos) / (window * 1e9)
        if !feederKeptUp {
            FileHandle.standardError.write(
                Data(
                    ("\(context.label): \(spec.key): THE FEEDER DID NOT KEEP UP (queue empty on \(Format.micros(emptyPollsPct))% of polls, "
                        + "mean length \(Format.micros(meanQueue)) of \(settings.backlog)): this level measured the feeder, not receiptq\n").utf8))
        }

        level.merge(
            [
                "stages_ms": WorkerStages.json(stages ?? [:]),
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
                "rss_mb": Format.json(Double(memories.map(\.hwmKiB).max() ?? 0) / 1_024),
                "rss_now_mb": Format.json(Double(memories.map(\.rssKiB).max() ?? 0) / 1_024),
                "rss_mb_all_workers": Format.json(Double(memories.reduce(0) { $0 + $1.rssKiB }) / 1_024),
                "worker_threads": memories.map(\.threads).max() ?? -1,
                "worker_context_switches_per_job": [
                    "voluntary": Format.json(Double(switches.voluntary) / perJob, places: 100),
                    "involuntary": Format.json(Double(switches.involuntary) / perJob, places: 100),
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
                    "redis_children": cores(redisChildCPU), "mock_appstore": cores(mockCPU), "bench": cores(benchCPU),
                    "ours": Format.json(oursCores, places: 100),
                    "other": Format.json(otherCores, places: 100),
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
                    "empty_polls_pct": Format.json(emptyPollsPct),
                    "mean_wait_ms": Format.json(rps > 0 ? 1_000 * meanQueue / rps : .nan, places: 100),
                    "feeder_kept_up": feederKeptUp, "feeder_busy_pct": Format.json(feederBusyPct),
                    "feeder_cpu_pct": Format.json(feederCPUPct),
                ],
                "durable": [
                    "jobs_pushed": pushed, "receipts_stored": stored, "receipts_valid": valid, "dead": dead, "retry": retry,
                    "left_in_queue": queued, "all_stored": stored == pushed && valid == pushed,
                ],
                "worker_exit": exits.map { $0.map { Int($0) } ?? -9 },
            ]
        ) { _, new in new }
        if let error = after.feeder.firstError { level["feeder_error"] = error }
        if stored != pushed || valid != pushed {
            FileHandle.standardError.write(
                Data("\(context.label): \(spec.key): \(pushed) pushed, \(stored) stored, \(valid) valid (dead \(dead), retry \(retry))\n".utf8))
            for worker in workers { FileHandle.standardError.write(Data((worker.logTail() + "\n").utf8)) }
        }
        return level
    }

    // MARK: - Output

    static func tableRow(_ key: String, _ level: [String: Any]) -> [String] {
        func value(_ name: String) -> Double { number(level[name]) ?? .nan }
        let run = "\(level["run"] ?? 1)"
        let load = (level["load_average_before"] as? [Double])?.first.map { String(format: "%.2f", $0) } ?? "-"
        guard level["rps"] != nil else {
            return [key, run, "-", "error", Format.rate(value("ideal_rps")), "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", load]
        }
        let byProcess = level["cpu_us_per_job_by_process"] as? [String: Double] ?? [:]
        let machine = level["machine_cpu_pct"] as? [String: Double] ?? [:]
        return [
            key, run, "\(level["worker_threads"] ?? "?")", Format.rate(value("rps")), Format.rate(value("ideal_rps")),
            Format.micros(value("pct_of_ideal")), Format.micros(value("p50_ms")), Format.micros(value("p99_ms")),
            Format.micros(value("cpu_us_per_job")), Format.micros(value("rss_mb")), Format.micros(byProcess["postgres"] ?? .nan),
            Format.micros(byProcess["redis"] ?? .nan), Format.micros(byProcess["mock_appstore"] ?? .nan),
            Format.micros(byProcess["bench"] ?? .nan), Format.micros(machine["busy"] ?? .nan), load,
        ]
    }

    /// A JSON number as a Double (results hold Doubles and Ints).
    static func number(_ value: Any?) -> Double? { (value as? Double) ?? (value as? Int).map(Double.init) }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.filter(\.isFinite).sorted()
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    static let coreGroups = ["worker", "postgres", "redis", "redis_children", "mock_appstore", "bench", "ours", "other"]

    /// One level's runs as one result: a single run as it is; several as the medians of the
    /// headline numbers, a summary of each run, and the full detail of the run with the median rps.
    static func combine(_ runs: [[String: Any]]) -> [String: Any] {
        guard runs.count > 1 else { return runs.first ?? ["error": "not run"] }
        let good = runs.filter { $0["error"] == nil && $0["rps"] != nil }
        guard let first = good.first else { return runs[0].merging(["runs": runs.map(runSummary)]) { _, new in new } }
        func med(_ name: String, places: Double = 10) -> Double { Format.json(median(good.compactMap { number($0[name]) }), places: places) }
        func medCores(_ group: String) -> Double {
            Format.json(median(good.compactMap { number(($0["cores_used"] as? [String: Any])?[group]) }), places: 100)
        }
        let medianRun = good.sorted { (number($0["rps"]) ?? 0) < (number($1["rps"]) ?? 0) }[(good.count - 1) / 2]
        var cores: [String: Any] = [:]
        for group in coreGroups { cores[group] = medCores(group) }
        return [
            "concurrency": first["concurrency"] ?? -1, "processes": first["processes"] ?? -1, "in_flight_max": first["in_flight_max"] ?? -1,
            "ideal_rps": first["ideal_rps"] ?? -1,
            "runs_measured": good.count, "runs_failed": runs.count - good.count,
            "rps": med("rps"), "rps_min": Format.json(good.compactMap { number($0["rps"]) }.min() ?? .nan),
            "rps_max": Format.json(good.compactMap { number($0["rps"]) }.max() ?? .nan),
            "pct_of_ideal": med("pct_of_ideal"), "p50_ms": med("p50_ms", places: 100), "p99_ms": med("p99_ms", places: 100),
            "validated_p50_ms": med("validated_p50_ms", places: 100), "cpu_us_per_job": med("cpu_us_per_job"),
            "cpu_us_per_job_total": med("cpu_us_per_job_total"), "cpu_ceiling_rps": med("cpu_ceiling_rps"),
            "machine_busy_pct": Format.json(median(good.compactMap { number(($0["machine_cpu_pct"] as? [String: Any])?["busy"]) })),
            "cores_used": cores,
            "feeder_kept_up": good.allSatisfy { (($0["queue"] as? [String: Any])?["feeder_kept_up"] as? Bool) == true },
            "all_stored": good.allSatisfy { (($0["durable"] as? [String: Any])?["all_stored"] as? Bool) == true },
            "runs": runs.map(runSummary),
            "median_run": medianRun,
        ]
    }

    /// The numbers of one run that a reader compares across runs.
    static func runSummary(_ level: [String: Any]) -> [String: Any] {
        var summary: [String: Any] = [:]
        for name in [
            "run", "rps", "p50_ms", "p99_ms", "cpu_us_per_job", "cpu_us_per_job_total", "jobs_in_window", "rss_mb", "cores_used",
            "load_average_before", "load_average_after", "load_wait_s", "load_quiet", "error", "detail",
        ] {
            if let value = level[name] { summary[name] = value }
        }
        if let busy = (level["machine_cpu_pct"] as? [String: Any])?["busy"] { summary["machine_busy_pct"] = busy }
        if let queue = level["queue"] as? [String: Any] {
            summary["feeder_kept_up"] = queue["feeder_kept_up"]
            summary["queue_empty_polls_pct"] = queue["empty_polls_pct"]
            summary["queue_mean_length"] = queue["mean_length"]
        }
        if let durable = level["durable"] as? [String: Any] { summary["all_stored"] = durable["all_stored"] }
        return summary
    }

    /// Throughput against the number of processes, per concurrency: the speed-up over the fewest processes.
    static func scaling(levels: [Level], result: [String: Any]) -> [[String: Any]] {
        var rows: [[String: Any]] = []
        for concurrency in Set(levels.map(\.concurrency)).sorted() {
            let group = levels.filter { $0.concurrency == concurrency }
            let base = group.first.flatMap { number((result[$0.key] as? [String: Any])?["rps"]) }
            for level in group {
                guard let entry = result[level.key] as? [String: Any], let rps = number(entry["rps"]) else { continue }
                rows.append([
                    "key": level.key, "processes": level.processes, "concurrency": concurrency, "rps": rps,
                    "speedup": Format.json(base.map { rps / $0 } ?? .nan, places: 100),
                    "p50_ms": entry["p50_ms"] ?? -1, "p99_ms": entry["p99_ms"] ?? -1, "cores_used": entry["cores_used"] ?? [:],
                ])
            }
        }
        return rows
    }

    /// Medians per level and where the cores went: the table that shows the bottleneck moving.
    static func coresTable(levels: [Level], result: [String: Any], runs: Int) -> TextTable {
        var table = TextTable(
            title: "medians over \(runs) run(s) per level; cores = CPU seconds per second in the window (2 cores = the machine)",
            headers: [
                "level", "runs", "rps", "rps range", "×", "p50 ms", "p99 ms", "workers", "postgres", "redis", "mock", "bench", "other",
                "busy %", "load 1m", "feeder",
            ])
        var base: [Int: Double] = [:]
        for level in levels {
            guard let entry = result[level.key] as? [String: Any] else { continue }
            let cores = entry["cores_used"] as? [String: Any] ?? [:]
            func core(_ group: String) -> String { number(cores[group]).map { String(format: "%.2f", $0) } ?? "-" }
            let rps = number(entry["rps"]) ?? .nan
            if base[level.concurrency] == nil { base[level.concurrency] = rps }
            let summaries = entry["runs"] as? [[String: Any]] ?? [entry]
            let loads = summaries.compactMap { ($0["load_average_before"] as? [Double])?.first }
            let range = number(entry["rps_min"]).map { "\(Format.rate($0))–\(Format.rate(number(entry["rps_max"]) ?? .nan))" } ?? "-"
            let busy = number(entry["machine_busy_pct"]) ?? number((entry["machine_cpu_pct"] as? [String: Any])?["busy"]) ?? .nan
            let keptUp = (entry["feeder_kept_up"] as? Bool) ?? ((entry["queue"] as? [String: Any])?["feeder_kept_up"] as? Bool)
            table.add([
                level.key, "\(entry["runs_measured"] ?? 1)", Format.rate(rps), range,
                String(format: "%.2f", rps / (base[level.concurrency] ?? .nan)), Format.micros(number(entry["p50_ms"]) ?? .nan),
                Format.micros(number(entry["p99_ms"]) ?? .nan), core("worker"), core("postgres"), core("redis"), core("mock_appstore"),
                core("bench"), core("other"), Format.micros(busy),
                loads.isEmpty ? "-" : loads.map { String(format: "%.2f", $0) }.joined(separator: "/"),
                keptUp == true ? "ok" : keptUp == false ? "BEHIND" : "?",
            ])
        }
        table.notes = [
            "× = rps ÷ rps of the first process count at the same concurrency; load 1m = the 1-minute load average when each run began",
            "workers = every receiptq work process together; other = busy cores no process of the row accounts for (the machine is shared)",
            "feeder BEHIND = the queue ran empty: that level measured the feeder, not receiptq",
        ]
        return table
    }

    static func indexSummary(_ value: Any?) -> String {
        guard let reads = value as? [String: Double], !reads.isEmpty else { return "-" }
        return reads.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }

    static func stagesSummary(_ value: Any?) -> String {
        guard let stages = value as? [String: Any], !stages.isEmpty else { return "-" }
        let means = Dictionary(uniqueKeysWithValues: stages.compactMap { key, value in (value as? Double).map { (String(key.dropLast(3)), $0) } })
        return WorkerStages.line(means)
    }

    static func levelDetail(_ key: String, _ level: [String: Any]) -> String {
        let redis = level["redis_per_job"] as? [String: Any] ?? [:]
        let postgres = level["postgres_per_job"] as? [String: Any] ?? [:]
        let queue = level["queue"] as? [String: Any] ?? [:]
        let machine = level["machine_cpu_pct"] as? [String: Double] ?? [:]
        let durable = level["durable"] as? [String: Any] ?? [:]
        let cores = level["cores_used"] as? [String: Double] ?? [:]
        let switches = level["worker_context_switches_per_job"] as? [String: Double] ?? [:]
        func text(_ value: Any?) -> String { value.map { "\($0)" } ?? "?" }
        return """
              \(key): \(text(level["jobs_in_window"])) jobs in \(text(level["window_s"])) s; validated_at − enqueued p50/p99 \
            \(text(level["validated_p50_ms"]))/\(text(level["validated_p99_ms"])) ms; App Store call p50/p99 \
            \(text(level["apple_call_p50_ms"]))/\(text(level["apple_call_p99_ms"])) ms; queue mean \(text(queue["mean_length"])) \
            jobs (≈ \(text(queue["mean_wait_ms"])) ms wait, \(text(queue["empty_polls_pct"]))% empty polls, feeder kept up: \
            \(text(queue["feeder_kept_up"])), busy \(text(queue["feeder_busy_pct"]))% of the window)
                per job: Redis \(text(redis["round_trips_of_a_lane"])) lane round trips, \(text(redis["lane_commands"])) lane \
            commands, \(text(redis["net_in_bytes"])) B in; Postgres \(text(postgres["xact_commit"])) commits, \
            \(text(postgres["tup_inserted"])) rows inserted, \(text(postgres["wal_sync"])) WAL fsyncs, \(text(postgres["wal_bytes"])) WAL bytes
                Postgres index tuples read per job: \(indexSummary(postgres["index_tuples_read"]))
                mean ms per job in the worker (reserved → settled; http = libcurl's time for Apple's calls): \(stagesSummary(level["stages_ms"]))
                CPU: \(text(level["cpu_us_per_job_total"])) µs per job in all processes → at most \(text(level["cpu_ceiling_rps"])) jobs/s \
            on this machine's cores
                cores: worker \(text(cores["worker"])), postgres \(text(cores["postgres"])), redis \(text(cores["redis"])), \
            mock \(text(cores["mock_appstore"])), bench \(text(cores["bench"])), others' \(text(cores["other"])); machine busy \(text(machine["busy"]))%, \
            iowait \(text(machine["iowait"]))%, steal \(text(machine["steal"]))%; worker threads \(text(level["worker_threads"])), \
            context switches/job \(text(switches["voluntary"])) voluntary + \(text(switches["involuntary"])) involuntary; \
            durable: \(text(durable["receipts_valid"]))/\(text(durable["jobs_pushed"])) valid in Postgres
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
