import Foundation
import Hiredis
import Logging
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ReceiptWorker
import RedisJobQueue

/// `queue_only`: the Redis queue path alone, jobs per second.
///
/// A feeder `LPUSH`es real envelopes (the pipeline row's, ~4 KB with the receipt) to keep a deep
/// backlog; the real `WorkerEngine` with N jobs in flight takes them in batches (pipelined `LMOVE`s),
/// "verifies" them with a verifier that answers at once, "stores" them in memory (no Postgres) and
/// settles them with the real `RedisWorkQueue` (one MULTI/EXEC per batch: result LPUSH + EXPIRE,
/// DEL pending, LREM per job). Per job that is the envelope's JSON decode and the result's JSON
/// encode, on the Redis of scripts/services (AOF on, `appendfsync everysec`). Everything runs in
/// the bench's process; the CPU of Redis and of the bench is reported per job.
///
/// `rps` is the best concurrency; `with_circuit_rps` adds the outage circuit as the worker uses it
/// (a local gate, outcomes sent to Redis in batches).
enum QueueOnlyRow: BenchRow {
    static let name = "queue_only"
    static let summary = "Redis queue alone: LPUSH feeder + WorkerEngine (N in flight) → instant verifier, in-memory store → settle (jobs/s)"
    static let services = ["redis"]
    static let options = [
        OptionSpec(name: "--lanes", takesValue: true, help: "concurrencies (jobs in flight) to try, comma-separated (default 64,256,1024)"),
        OptionSpec(name: "--warmup-seconds", takesValue: true, help: "load before each window (default 2)"),
        OptionSpec(name: "--seconds", takesValue: true, help: "each measured window (default 10)"),
        OptionSpec(name: "--no-circuit-run", takesValue: false, help: "skip the extra run with the outage circuit"),
        OptionSpec(name: "--perf-lanes", takesValue: true, help: "perf record bench + Redis after this concurrency's window (default 256; 0 = none)"),
    ]

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let laneCounts = try options.positiveList("--lanes", default: "64,256,1024")
        let warmup = Double(options.extra["--warmup-seconds"] ?? "2") ?? 2
        let perfLanes = Int(options.extra["--perf-lanes"] ?? "256") ?? 256
        let seconds = max(1, Double(options.extra["--seconds"] ?? "10") ?? 10)
        let configuration = try AppConfiguration()
        let redis = try RedisConnection(configuration: configuration.redis, label: "bench")
        defer { redis.close() }
        FileHandle.standardError.write(Data("queue_only: forging the receipt template…\n".utf8))
        let template = try JobFactory.forgeReceipt(bundleID: "com.example.receiptq.bench")
        let factory = try JobFactory(receipt: template, appID: JobID.make())

        var table = TextTable(
            title: "queue_only: Redis queue path, \(Format.json(warmup)) s warm-up + \(Format.json(seconds)) s per run (in-process lanes)",
            headers: [
                "run", "lanes", "jobs/s", "bench µs/job", "redis µs/job", "redis cmds/job", "redis B in/job", "machine busy %", "AOF forks",
            ])
        var runs: [String: Any] = [:]
        var best: (lanes: Int, rps: Double) = (0, 0)
        var serial = 0
        for lanes in laneCounts {
            FileHandle.standardError.write(Data("queue_only: \(lanes) lanes…\n".utf8))
            let result = try measure(
                lanes: lanes, circuit: false, configuration: configuration, redis: redis, factory: factory, serial: &serial,
                warmup: warmup, seconds: seconds, perf: lanes == perfLanes)
            runs["lanes_\(lanes)"] = result
            table.add(row("queue", result))
            if let rps = result["rps"] as? Double, rps > best.rps { best = (lanes, rps) }
        }
        var output: [String: Any] = [
            "rps": Format.json(best.rps), "lanes": best.lanes, "runs": runs,
            "targets": ["rps_ge_15000": ["value": Format.json(best.rps), "met": best.rps >= 15_000]],
            "envelope_bytes": factory.makeJob(serial: 0).bytes.count, "warmup_s": warmup, "window_s": seconds,
            "method":
                "WorkerEngine in the bench process; RedisWorkQueue batched reserve (LMOVE pipeline) + settle (MULTI/EXEC per batch); "
                + "instant verifier, in-memory store; processed jobs in the window / window",
        ]
        if !options.has("--no-circuit-run"), best.lanes > 0 {
            FileHandle.standardError.write(Data("queue_only: \(best.lanes) lanes with the outage circuit…\n".utf8))
            let result = try measure(
                lanes: best.lanes, circuit: true, configuration: configuration, redis: redis, factory: factory, serial: &serial,
                warmup: warmup, seconds: seconds)
            output["with_circuit"] = result
            output["with_circuit_rps"] = result["rps"]
            table.add(row("+circuit", result))
        }
        table.notes = [
            "jobs/s = jobs settled in the window; µs/job = process CPU over the window ÷ jobs (bench = feeder + worker); lanes = jobs in flight",
            "best: \(best.lanes) lanes, \(Format.rate(best.rps)) jobs/s (target ≥ 15000: \(best.rps >= 15_000 ? "met" : "not met")); "
                + "envelopes of \(output["envelope_bytes"] ?? "?") bytes",
        ]
        for (key, run) in runs.sorted(by: { $0.key < $1.key }) {
            if let perf = (run as? [String: Any])?["perf"] as? [String: Any] {
                table.notes += PerfProfile.notes(perf, title: "the bench process (feeder + lanes) and Redis, \(key)")
            }
        }
        print(table.render())
        return output
    }

    static func row(_ label: String, _ result: [String: Any]) -> [String] {
        func value(_ name: String) -> Double { (result[name] as? Double) ?? .nan }
        return [
            label, "\(result["lanes"] ?? "?")", Format.rate(value("rps")), Format.micros(value("bench_cpu_us_per_job")),
            Format.micros(value("redis_cpu_us_per_job")), Format.micros(value("redis_commands_per_job")),
            Format.rate(value("redis_net_in_bytes_per_job")), Format.micros(value("machine_busy_pct")), "\(result["redis_forks"] ?? "?")",
        ]
    }

    static func measure(
        lanes: Int, circuit: Bool, configuration: AppConfiguration, redis: RedisConnection, factory: JobFactory, serial: inout Int,
        warmup: Double, seconds: Double, perf: Bool = false
    ) throws -> [String: Any] {
        let prefix = "{rqb-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis) }
        let app = AppRecord(
            id: factory.appIDs[0], name: "bench", bundleID: factory.receipt.bundleID, sharedSecret: nil, excludeOldTransactions: false)
        let redisConfiguration = configuration.redis
        var logger = Logger(label: "bench.queue_only")
        logger.logLevel = .warning
        let workerID = "bench\(prefix)"
        let pool = WorkerEngine(
            configuration: .init(
                concurrency: lanes, reserveTimeout: .milliseconds(500), shutdownTimeout: .seconds(10), heartbeatInterval: .seconds(10)),
            makeQueue: { role in
                RedisWorkQueue(
                    connection: try RedisConnection(configuration: redisConfiguration, label: "queue-\(role)"), keys: keys,
                    workerID: workerID)
            },
            makeStore: { _ in InstantStore(app: app) },
            makeCircuit: {
                circuit ? RedisOutageCircuit(connection: try RedisConnection(configuration: redisConfiguration, label: "circuit"), keys: keys) : nil
            }, verifier: InstantVerifier(), logger: logger)
        let task = Task { try await pool.run() }
        defer {
            pool.stop()
            _ = try? blockingAwait { try await task.value }
        }
        let readyBy = Date().addingTimeInterval(30)
        while Date() < readyBy, (try redis.send(["SCARD", keys.workers]).int ?? 0) < 1 { usleep(50_000) }

        let feederRedis = try RedisConnection(configuration: redisConfiguration, label: "bench-feeder")
        defer { feederRedis.close() }
        let feeder = Feeder(
            redis: feederRedis, keys: keys, factory: factory, firstSerial: serial,
            settings: .init(backlog: 4_000, maxBatch: 500, pollMicros: 1_000))
        feeder.start()
        pause(seconds: warmup)
        let processed0 = pool.processedCount
        let wall0 = Date()
        let cpu0 = ProcessStats.selfCPUMicros()
        let redis0 = try RedisStats.sample(redis)
        let machine0 = MachineCPU.sample()
        pause(seconds: seconds)
        let processed1 = pool.processedCount
        let wall1 = Date()
        let cpu1 = ProcessStats.selfCPUMicros()
        let redis1 = try RedisStats.sample(redis)
        let machine1 = MachineCPU.sample()
        let feederCounters = feeder.counters
        var profile: [String: Any]?
        if perf {
            FileHandle.standardError.write(Data("queue_only: perf record of the bench and Redis (after the window)…\n".utf8))
            let directory = FileManager.default.temporaryDirectory
            // Redis only when it runs here (its INFO pid is a redis-server of this machine).
            let redisPID = redis1.processID.flatMap { pid in
                ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").hasPrefix("redis") ? pid : nil
            }
            profile = PerfProfile.record(pids: [getpid()] + (redisPID.map { [$0] } ?? []), seconds: 5, directory: directory)
        }
        serial = feeder.stop()

        let jobs = Double(max(processed1 - processed0, 1))
        let window = wall1.timeIntervalSince(wall0)
        let calls = RedisStats.callDelta(redis0, redis1)
        var commands: [String: Any] = [:]
        // The bench's own LLEN/SCARD/INFO are not the queue's: leave them out of the per-job count.
        let ours: Set<String> = ["llen", "info", "scard"]
        for (name, count) in calls where !ours.contains(name) { commands[name] = Format.json(count / jobs, places: 1_000) }
        let total = calls.filter { !ours.contains($0.key) }.values.reduce(0, +) / jobs
        let machine = MachineCPU.shares(machine0, machine1)
        var result: [String: Any] = [
            "lanes": lanes, "circuit": circuit,
            "rps": Format.json(Double(processed1 - processed0) / window),
            "jobs_in_window": processed1 - processed0, "window_s": Format.json(window, places: 100),
            "bench_cpu_us_per_job": Format.json((cpu1 - cpu0) / jobs),
            "redis_cpu_us_per_job": Format.json((redis1.cpuSeconds - redis0.cpuSeconds) * 1_000_000 / jobs),
            "redis_children_cpu_us_per_job": Format.json((redis1.childCPUSeconds - redis0.childCPUSeconds) * 1_000_000 / jobs),
            "redis_commands_per_job": Format.json(total, places: 100),
            "redis_commands": commands,
            "redis_net_in_bytes_per_job": Format.json((redis1.netInputBytes - redis0.netInputBytes) / jobs, places: 1),
            "redis_forks": Int(redis1.forks - redis0.forks),
            "machine_busy_pct": Format.json(machine.busy),
            "machine_iowait_pct": Format.json(machine.iowait),
            "machine_steal_pct": Format.json(machine.steal),
            "feeder_empty_polls": feederCounters.emptyPolls,
        ]
        if let error = feederCounters.firstError { result["feeder_error"] = error }
        if let profile { result["perf"] = profile }
        return result
    }
}

/// A store with no database: the app is known, saving builds the resource from the record.
final class InstantStore: ReceiptStore, DeliveryLog, RefundDefenceLog {
    private let known: AppRecord

    init(app: AppRecord) { known = app }

    func app(id: UUID) throws -> AppRecord? { id == known.id ? known : nil }

    /// The queue-only row's jobs are receipts of a verifyReceipt app: no history is ever read.
    func historyCursors(_ keys: Set<HistoryKey>) throws -> [HistoryKey: HistoryCursor] { [:] }

    func save(_ records: [ValidationRecord]) throws -> [Result<ReceiptResource?, StoreFailure>] {
        records.map { record in
            var resource = ReceiptResource.pending(record.envelope, purchases: record.purchases)
            resource.validationStatus = record.status
            return .success(resource)
        }
    }

    /// The queue row queues validations only: no delivery reaches this store.
    func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord? { nil }
    func record(_ outcomes: [DeliveryOutcome]) throws {}

    /// Nor any consumption request: the policy is `off`, so none would be answered.
    func consumptionFacts(appID: UUID, environment: String?, transactionID: String, notificationID: String) throws -> ConsumptionFacts {
        ConsumptionFacts(policy: .off)
    }
    func claimConsumption(appID: UUID, notificationID: String, transactionID: String, job: UUID) throws -> Bool { false }
    func record(_ answers: [ConsumptionAnswer]) throws {}
}

/// Apple answering `status 0` at once, with no purchases to parse.
final class InstantVerifier: ReceiptVerifier, Sendable {
    private static let outcome = ValidationOutcome(
        verdict: .valid, environment: "production", appleStatus: 0,
        calls: [AppleCall(endpoint: .production, httpStatus: 200, appleStatus: 0, isRetryable: nil, latencyMs: 0, errorCode: nil)])

    func verify(_ request: ValidationRequest, completion: @escaping @Sendable (ValidationOutcome) -> Void) { completion(Self.outcome) }
}
