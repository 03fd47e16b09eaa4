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
    /// Three runs per level: one run on a shared 2-core machine can be off by a fifth.
    static let defaultIterations = 3
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
            name: "--server-api-jobs", takesValue: true,
            help: "which server_api levels, comma-separated: first (history + statuses), known (one call), local (none) (default all)"),
        OptionSpec(
            name: "--profile-level", takesValue: true,
            help: "profile this level's first run instead (e.g. server_api_known_c100); its perf record goes to profile_<level>"),
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
        /// Every receipts level's jobs go to this app instead of a fresh one (a soak's days are
        /// one app's traffic).
        var fixedApp: AppRecord?
        /// The receipts levels' customers (``JobFactory/population``); nil: a new one per job.
        var population: Int?
        /// When set, every level's latency observations are appended here (a row that judges
        /// each one against what else ran at the time).
        var observations: [ResultWatcher.Observation]?
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

        /// Stops the mock and closes the connections.
        func close() {
            mock?.stop()
            redis.close()
            postgres.close()
        }

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
        /// StoreKit 2 jobs through the Server API instead of receipts through verifyReceipt, and which.
        var serverAPIJobs: ServerAPIJobs?
        var serverAPI: Bool { serverAPIJobs != nil }
    }

    /// The StoreKit 2 jobs of a `server_api` level: what each costs at Apple is the call budget
    /// of issue 42 (a first sight reads the history, a customer already seen is one call, a fresh
    /// door-verified JWS of a `local` app none).
    enum ServerAPIJobs: String, CaseIterable {
        /// Bare transaction ids never seen: the history, then the statuses (two calls).
        case first
        /// Door-verified signed transactions of customers already seen (their history cursor
        /// stored), apps on `jws_trust: apple`: Get All Subscription Statuses alone (one call).
        case known
        /// Door-verified signed transactions signed just now, apps on `jws_trust: local`: stored as
        /// read at the door (no call).
        case local

        /// Apple calls a job makes, each at the mock's latency.
        var calls: Int {
            switch self {
            case .first: 2
            case .known: 1
            case .local: 0
            }
        }

        func key(concurrency: Int) -> String { self == .first ? "server_api_c\(concurrency)" : "server_api_\(rawValue)_c\(concurrency)" }
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] { try run(options, defaults: .pipeline) }

    /// A non-negative number option, or `fallback` when absent.
    static func optionNumber(_ options: BenchOptions, _ name: String, _ fallback: Double) throws -> Double {
        guard let text = options.extra[name] else { return fallback }
        guard let value = Double(text), value >= 0 else { throw BenchFailure(description: "\(name) needs a number, not \(text)") }
        return value
    }

    /// The servers' connections (migrated), the mock started and the receipt forged: what every
    /// level of a run shares. The caller closes it (``Context/close()``).
    static func openContext(
        _ options: BenchOptions, defaults: Defaults, latencyMs: Int, serverAPI: Bool
    ) throws -> (context: Context, durability: [String: Any]) {
        // Every worker session commits synchronously, whatever the server's default: libpq reads
        // PGOPTIONS at connect time, in the worker (inherited) and in this process alike.
        let pgOptions = ((ProcessInfo.processInfo.environment["PGOPTIONS"] ?? "") + " -c synchronous_commit=on")
            .trimmingCharacters(in: .whitespaces)
        setenv("PGOPTIONS", pgOptions, 1)
        func number(_ name: String, _ fallback: Double) throws -> Double { try optionNumber(options, name, fallback) }
        let configuration = try AppConfiguration()
        let receiptq = try locateReceiptq(options.extra["--receiptq"])
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench")
        let redis: RedisConnection
        let durability: [String: Any]
        do {
            durability = try checkDurability(postgres, allowFsyncOff: options.has("--allow-fsync-off"))
            try ReceiptQueueApp.migrate(configuration)
            redis = try RedisConnection(configuration: configuration.redis, label: "bench")
        } catch {
            postgres.close()
            throw error
        }
        let context = Context(
            configuration: configuration, postgres: postgres, redis: redis, receiptq: receiptq, latencyMs: latencyMs,
            warmup: try number("--warmup-seconds", 4), seconds: max(1, try number("--seconds", 12)))
        do {
            // Every level measures plans made for tables holding its warm-up, not the ones an earlier
            // row's cleanup left (nearly empty: scans that the level's own growth makes slower by the
            // second — Postgres CPU per job 1.6 → 7.7 ms within one run of the outbox row).
            context.analyzeAfterWarmup = !options.has("--no-analyze-after-warmup")
            context.quietLoad = try number("--quiet-load", defaults.quietLoad)
            context.quietWait = try number("--quiet-wait-seconds", 900)
            context.label = defaults.row
            if serverAPI {
                context.serverAPI = try prepareServerAPI(context, apps: min(1_000, max(1, Int(try number("--server-api-apps", 40)))))
            }
            try startMock(context)
            FileHandle.standardError.write(Data("\(defaults.row): forging the receipt template…\n".utf8))
            context.receipt = try JobFactory.forgeReceipt(bundleID: Context.bundleID)
        } catch {
            context.close()
            throw error
        }
        return (context, durability)
    }

    static func run(_ options: BenchOptions, defaults: Defaults) throws -> [String: Any] {
        func number(_ name: String, _ fallback: Double) throws -> Double { try optionNumber(options, name, fallback) }
        let concurrencies = try options.positiveList("--concurrency", default: defaults.concurrencies)
        let serverAPIConcurrencies = try (options.extra["--server-api-concurrency"] ?? defaults.serverAPIConcurrencies)
            .split(separator: ",").map { text -> Int in
                guard let value = Int(text.trimmingCharacters(in: .whitespaces)), value >= 0 else {
                    throw BenchFailure(description: "--server-api-concurrency needs whole numbers, not \(text)")
                }
                return value
            }.filter { $0 > 0 }
        let serverAPIJobs = try (options.extra["--server-api-jobs"] ?? ServerAPIJobs.allCases.map(\.rawValue).joined(separator: ","))
            .split(separator: ",").map { text -> ServerAPIJobs in
                guard let jobs = ServerAPIJobs(rawValue: text.trimmingCharacters(in: .whitespaces)) else {
                    throw BenchFailure(description: "--server-api-jobs takes first, known or local, not \(text)")
                }
                return jobs
            }
        let profileLevel = options.extra["--profile-level"]
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
            + serverAPIConcurrencies.flatMap { concurrency in
                serverAPIJobs.map { Level(processes: 1, concurrency: concurrency, key: $0.key(concurrency: concurrency), serverAPIJobs: $0) }
            }
        let runs = options.iterations(default: defaults.iterations)
        let latencyMs = Int(try number("--latency-ms", 50))
        let profileAt = Int(try number("--profile-at", Double(defaults.profileAt)))
        guard latencyMs > 0 else { throw BenchFailure(description: "--latency-ms must be positive") }

        let (context, durability) = try openContext(options, defaults: defaults, latencyMs: latencyMs, serverAPI: !serverAPIConcurrencies.isEmpty)
        defer { context.close() }
        let receiptq = context.receiptq

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
                "redis µs/job", "mock µs/job", "bench µs/job", "machine busy %", "Apple calls/job", "load 1m",
            ])
        var profile: [String: Any]?
        var details: [String] = []
        var measured: [String: [[String: Any]]] = [:]
        do {
            for run in 1...runs {
                for level in levels {
                    FileHandle.standardError.write(Data("\(defaults.row): \(level.key), run \(run) of \(runs)…\n".utf8))
                    // The receipts' level only: the Server API level at the same concurrency would
                    // record its own profile over it, under the receipts' title.
                    let profiling =
                        run == 1
                        && (profileLevel.map { $0 == level.key }
                            ?? (level.concurrency == profileAt && level.processes == processCounts[0] && !level.serverAPI))
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
        let profiled = profileLevel ?? "c\(profileAt)"
        if let profile { result["profile_\(profiled)"] = profile }
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
        if runs > 1 {
            // The spread says how far one run can be trusted on this shared machine.
            let spreads = levels.compactMap { level -> String? in
                guard let entry = result[level.key] as? [String: Any], let median = Self.number(entry["rps"]),
                    let low = Self.number(entry["rps_min"]), let high = Self.number(entry["rps_max"]), median > 0
                else { return nil }
                return "\(level.key) \(Format.rate(median)) (\(Format.rate(low))–\(Format.rate(high)), "
                    + String(format: "±%.0f %%", 50 * (high - low) / median) + ")"
            }
            table.notes.append("validations/s, median of \(runs) runs (min–max, ± half the range): " + spreads.joined(separator: "; "))
        }
        print(table.render())
        for detail in details { print(detail) }
        if runs > 1 || processCounts.count > 1 { print(coresTable(levels: levels, result: result, runs: runs).render()) }
        if let peer { print(peer.table.render()) }
        if let perf = profile?["perf"] as? [String: Any] {
            for note in PerfProfile.notes(perf, title: "workers, Postgres, Redis and mock at \(profiled)") { print(note) }
        }
        // The workers' and the mock's logs are kept only when the row fails.
        context.mock?.stop()
        try? FileManager.default.removeItem(at: context.logDirectory)
        return result
    }
}
