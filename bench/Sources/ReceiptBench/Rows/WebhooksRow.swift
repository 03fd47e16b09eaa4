import DevTools
import Foundation
import Hiredis
import Libpq
import Logging
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServiceLifecycle

/// `webhooks`: deliveries per second to a backend that answers in `--delay-ms` (50), with one
/// `receiptq work` process delivering at `--concurrency` (100) and the webhook dispatcher (the
/// schedule role's, in this process) queueing them from the outbox.
///
/// Each run writes `--deliveries` (20,000) events with a pending delivery each (distinct users,
/// so none waits for another) straight into Postgres, then starts the worker and times it from
/// its start until the last delivery row is `delivered`: the dispatcher's claims, the Redis queue,
/// the signed POSTs over libcurl multi, and the committed outcomes. The ideal is concurrency ÷
/// delay (2,000/s); the receiver (Hummingbird, in this process) checks every signature.
enum WebhooksRow: BenchRow {
    static let name = "webhooks"
    static let summary = "webhook deliveries/s to a receiver answering in 50 ms, one worker at concurrency 100 (ideal 2,000/s)"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let defaultIterations = 3
    static let options = [
        OptionSpec(name: "--deliveries", takesValue: true, help: "deliveries per run (default 20000); --iterations runs (default 3)"),
        OptionSpec(name: "--delay-ms", takesValue: true, help: "how long the receiver takes to answer (default 50)"),
        OptionSpec(name: "--concurrency", takesValue: true, help: "the worker's WORKER_CONCURRENCY (default 100)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
    ]

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let deliveries = try options.positive("--deliveries", default: 20_000)
        let delayMs = try options.positive("--delay-ms", default: 50)
        let concurrency = try options.positive("--concurrency", default: 100)
        let runs = options.iterations(default: defaultIterations)
        let receiptq = try PipelineRow.locateReceiptq(options.extra["--receiptq"])
        let secretsKey = SecureRandom.bytes(32)
        var environment = ProcessInfo.processInfo.environment
        let prefix = "{rqw-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        environment.merge([
            "REDIS_KEY_PREFIX": prefix, "RECEIPTQ_SECRETS_KEY": Data(secretsKey).base64EncodedString(), "LOG_LEVEL": "warning",
            "WORKER_CONCURRENCY": String(concurrency), "RECEIPTQ_ENV": "development",
        ]) { _, new in new }
        let configuration = try AppConfiguration(environment: environment)
        try ReceiptQueueApp.migrate(configuration)
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench")
        defer { postgres.close() }
        let redis = try RedisConnection(configuration: configuration.redis, label: "bench")
        defer { redis.close() }
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis) }
        let postmaster = PostgresStats.postmasterPID(postgres)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bench-webhooks-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)

        let (app, _) = try AppAdmin(connection: postgres).addApp(
            name: "bench-webhooks-\(UUID().uuidString.prefix(8).lowercased())", bundleID: "com.example.receiptq.bench.webhooks",
            sharedSecret: "s")
        defer { BenchApps.delete([app.id], on: postgres, row: name) }
        let quiet = {
            var logger = Logger(label: "bench-webhooks")
            logger.logLevel = .critical
            return logger
        }()
        let receiver = WebhookReceiver(secret: "pending")
        receiver.behave(.init(delay: .milliseconds(delayMs), keepBodies: false))
        let url = try blocking { try await receiver.start(logger: quiet) }
        defer { url.task.cancel() }
        let (endpoint, secret) = try WebhookAdmin(connection: postgres, secrets: try SecretBox(key: secretsKey)).add(
            appID: app.id, url: url.url, allowPrivate: true, description: "bench",
            audit: AuditAction(actor: "bench", role: nil, action: "webhook.add", source: "cli"))
        receiver.setSecret(secret)
        let dispatcher = ServiceGroup(
            services: [ReceiptQueueApp.makeWebhookDispatcher(configuration, onlyApps: [app.id], logger: quiet)], gracefulShutdownSignals: [],
            logger: quiet)
        let dispatching = Task { try await dispatcher.run() }
        defer {
            let done = DispatchSemaphore(value: 0)
            Task {
                await dispatcher.triggerGracefulShutdown()
                _ = try? await dispatching.value
                done.signal()
            }
            done.wait()
        }

        var results: [[String: Any]] = []
        for run in 1...runs {
            FileHandle.standardError.write(Data("webhooks: run \(run)/\(runs): \(deliveries) deliveries…\n".utf8))
            let base = (run - 1) * deliveries
            // The outbox as the committers leave it: an event and a pending delivery each.
            _ = try postgres.query(
                """
                WITH written AS (
                    INSERT INTO events (id, app_id, type, user_identifier, subject, sequence, occurred_at, data)
                    SELECT gen_random_uuid(), \(app.id), 'receipt.validated', 'bench-user-' || n, 'receipt:bench-' || n, 1, now(),
                           json_build_object('n', n, 'padding', repeat('x', 600))
                    FROM generate_series(\(base)::int, \(base + deliveries - 1)::int) AS n
                    RETURNING id, user_identifier
                )
                INSERT INTO webhook_deliveries (endpoint_id, event_id, app_id, ordering_key)
                SELECT \(endpoint), id, \(app.id), 'user:' || user_identifier FROM written
                """)
            // The dispatcher polls an idle outbox once a second: start the worker once it has begun
            // queueing, so the run measures deliveries, not the dispatcher's idle pause.
            let queueKey = RedisKeys(prefix: prefix).queue(JobKind.webhook.rawValue)
            let waitUntil = Date().addingTimeInterval(10)
            while try redis.send(["LLEN", queueKey]).int ?? 0 == 0, Date() < waitUntil { usleep(5_000) }
            let acceptedBefore = receiver.accepted
            func delivered() throws -> Int {
                try postgres.query(
                    "SELECT count(*) AS n FROM webhook_deliveries WHERE app_id = \(app.id) AND status = 'delivered'"
                ).rows.first?.int("n") ?? -1
            }
            let deliveredBefore = try delivered()
            let pgBefore = postmaster.map { ProcessStats.familyCPU(parent: $0) } ?? [:]
            let machineBefore = MachineCPU.sample()
            let benchBefore = ProcessStats.selfCPUMicros()
            let started = BenchClock.wall()
            let metricsPort = try freeLoopbackPort()
            var workerEnvironment = environment
            workerEnvironment["METRICS_PORT"] = String(metricsPort)
            let worker = try ChildProcess(
                executable: receiptq, arguments: ["work"], environment: workerEnvironment, label: "work", logDirectory: directory)
            var workerCPU = 0.0
            let deadline = Date().addingTimeInterval(600)
            // Watched at the receiver while it runs (a count over the table every 50 ms would be
            // Postgres work of the bench's own), then the rows once: each delivered, committed.
            var firstAt: UInt64?
            var tenthAt: UInt64?
            var ninetiethAt: UInt64?
            while receiver.accepted - acceptedBefore < deliveries, Date() < deadline {
                workerCPU = ProcessStats.cpuMicros(pid: worker.pid) ?? workerCPU
                let accepted = receiver.accepted - acceptedBefore
                if firstAt == nil, accepted > 0 { firstAt = BenchClock.wall() }
                if tenthAt == nil, accepted >= deliveries / 10 { tenthAt = BenchClock.wall() }
                if ninetiethAt == nil, accepted >= deliveries * 9 / 10 { ninetiethAt = BenchClock.wall() }
                usleep(5_000)
            }
            while try delivered() - deliveredBefore < deliveries, Date() < deadline {
                workerCPU = ProcessStats.cpuMicros(pid: worker.pid) ?? workerCPU
                usleep(20_000)
            }
            workerCPU = ProcessStats.cpuMicros(pid: worker.pid) ?? workerCPU
            let seconds = Double(BenchClock.wall() - started) / 1e9
            let done = try delivered() - deliveredBefore
            let pgCPU = postmaster == nil ? Double.nan : ProcessStats.familyDelta(pgBefore, ProcessStats.familyCPU(parent: postmaster!))
            let machine = MachineCPU.shares(machineBefore, MachineCPU.sample())
            let benchCPU = ProcessStats.selfCPUMicros() - benchBefore
            let stages = WorkerStages.scrape(ports: [metricsPort], kind: "webhook")
            worker.stop(grace: 10)
            let rate = Double(done) / seconds
            // The middle 80 % of deliveries: the worker's steady rate, without its start-up (process,
            // connections, first reserve) and the tail (the last batch's commit).
            var steady = Double.nan
            if let tenthAt, let ninetiethAt { steady = Double(deliveries * 8 / 10) / (Double(ninetiethAt - tenthAt) / 1e9) }
            results.append([
                "first_delivery_ms": Format.json(firstAt.map { Double($0 - started) / 1e6 } ?? .nan),
                "steady_deliveries_per_s": Format.json(steady),
                "delivered": done, "seconds": Format.json(seconds, places: 1_000), "deliveries_per_s": Format.json(rate),
                "share_of_ideal_pct": Format.json(100 * rate / (Double(concurrency) * 1000 / Double(delayMs))),
                "worker_cpu_us_per_delivery": Format.json(workerCPU / Double(max(done, 1))),
                "postgres_cpu_us_per_delivery": Format.json(pgCPU / Double(max(done, 1))),
                "receiver_and_dispatcher_cpu_us_per_delivery": Format.json(benchCPU / Double(max(done, 1))),
                "receiver_accepted": receiver.accepted - acceptedBefore, "machine_busy_pct": Format.json(machine.busy),
                "dead": try redis.send(["ZCARD", RedisKeys(prefix: prefix).dead]).int ?? -1,
                "stages_ms": WorkerStages.json(stages?.meanMs() ?? [:]),
            ])
        }
        return report(results, deliveries: deliveries, delayMs: delayMs, concurrency: concurrency)
    }

    /// Runs `body` on the concurrency pool and waits for it (the rows are synchronous).
    private static func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: Result<T, any Error>?
        Task {
            do { result = .success(try await body()) } catch { result = .failure(error) }
            done.signal()
        }
        done.wait()
        return try result!.get()
    }

    static func report(_ runs: [[String: Any]], deliveries: Int, delayMs: Int, concurrency: Int) -> [String: Any] {
        func values(_ key: String) -> [Double] { runs.map { ($0[key] as? Double) ?? ($0[key] as? Int).map(Double.init) ?? .nan } }
        func med(_ key: String) -> Double { Format.json(median(values(key))) }
        let ideal = Double(concurrency) * 1000 / Double(delayMs)
        let result: [String: Any] = [
            "deliveries_per_s": med("deliveries_per_s"), "share_of_ideal_pct": med("share_of_ideal_pct"),
            "steady_deliveries_per_s": med("steady_deliveries_per_s"), "first_delivery_ms": med("first_delivery_ms"),
            "spread_deliveries_per_s": [
                Format.json(values("deliveries_per_s").min() ?? .nan), Format.json(values("deliveries_per_s").max() ?? .nan),
            ],
            "worker_cpu_us_per_delivery": med("worker_cpu_us_per_delivery"), "postgres_cpu_us_per_delivery": med("postgres_cpu_us_per_delivery"),
            "receiver_and_dispatcher_cpu_us_per_delivery": med("receiver_and_dispatcher_cpu_us_per_delivery"),
            "machine_busy_pct": med("machine_busy_pct"), "ideal_per_s": ideal, "deliveries": deliveries, "delay_ms": delayMs,
            "concurrency": concurrency, "runs": runs,
            "method": [
                "deliveries_per_s":
                    "one receiptq work process from its start until the last of --deliveries outbox rows is delivered (median of runs)",
                "ideal_per_s": "concurrency ÷ the receiver's answer time",
                "steady_deliveries_per_s": "the receiver's rate between the 10th and the 90th percentile of deliveries (no start-up, no tail)",
                "first_delivery_ms": "from starting the worker process to the receiver's first delivery",
                "stages_ms":
                    "the worker's receiptq_job_stage_seconds means: call = reserved → answered, commit_wait, commit = its batch's Postgres transaction, settle = its batch's Redis settlement",
            ],
        ]
        var table = TextTable(
            title:
                "webhooks: \(deliveries) deliveries per run to a receiver answering in \(delayMs) ms, WORKER_CONCURRENCY \(concurrency) (ideal \(Format.rate(ideal))/s)",
            headers: [
                "run", "delivered/s", "% of ideal", "steady/s", "first ms", "worker µs/delivery", "Postgres µs/delivery", "bench µs/delivery",
                "machine busy %", "dead",
            ])
        for (index, run) in runs.enumerated() {
            func cell(_ key: String) -> String { Format.micros((run[key] as? Double) ?? (run[key] as? Int).map(Double.init) ?? .nan) }
            table.add([
                "run \(index + 1)", Format.rate((run["deliveries_per_s"] as? Double) ?? .nan), cell("share_of_ideal_pct"),
                Format.rate((run["steady_deliveries_per_s"] as? Double) ?? .nan), cell("first_delivery_ms"),
                cell("worker_cpu_us_per_delivery"), cell("postgres_cpu_us_per_delivery"), cell("receiver_and_dispatcher_cpu_us_per_delivery"),
                cell("machine_busy_pct"),
                (run["dead"] as? Int).map(String.init) ?? "-",
            ])
        }
        table.add([
            "median", Format.rate((result["deliveries_per_s"] as? Double) ?? .nan), Format.micros((result["share_of_ideal_pct"] as? Double) ?? .nan),
            Format.rate((result["steady_deliveries_per_s"] as? Double) ?? .nan), Format.micros((result["first_delivery_ms"] as? Double) ?? .nan),
            Format.micros((result["worker_cpu_us_per_delivery"] as? Double) ?? .nan),
            Format.micros((result["postgres_cpu_us_per_delivery"] as? Double) ?? .nan),
            Format.micros((result["receiver_and_dispatcher_cpu_us_per_delivery"] as? Double) ?? .nan),
            Format.micros((result["machine_busy_pct"] as? Double) ?? .nan), "",
        ])
        for (index, run) in runs.enumerated() {
            guard let stages = run["stages_ms"] as? [String: Double], !stages.isEmpty else { continue }
            let means = Dictionary(uniqueKeysWithValues: stages.map { (String($0.key.dropLast(3)), $0.value) })
            table.notes.append("run \(index + 1), mean ms per delivery in the worker: " + WorkerStages.line(means))
        }
        table.notes.append(
            "bench µs: this process's CPU, where the receiver (checking every signature) and the dispatcher (as the schedule role would) run")
        print(table.render())
        return result
    }
}
