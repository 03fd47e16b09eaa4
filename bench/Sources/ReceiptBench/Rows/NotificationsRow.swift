import DevTools
import Foundation
import Hiredis
import Libpq
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature
import ReceiptTesting
import RedisJobQueue

/// `notifications`: App Store Server Notifications, at the door and in a worker.
///
/// **Endpoint.** `receiptq serve` (release, its own process, `API_SYNC_WAIT_MS=0`, no worker) takes
/// `POST /apple/notifications/{app}/{token}` from `wrk` (the `ingest` row's script and measurement):
/// each body a distinct V2 `REFUND` notification signed by a mock Apple chain made for the run
/// (its root is the only trust root), with its nested signed transaction: the server checks both
/// chains and signatures, the bundle id, then queues the job durably in Redis and answers 200.
/// Every 2xx must be in the notification queue after the run. Compare with the `ingest` row (the
/// receipts endpoint) run in the same session: `scripts/bench ingest notifications`.
///
/// **Worker.** `--jobs` (20,000) such notifications queued in Redis at once, then one `receiptq
/// work` process (`WORKER_CONCURRENCY` 64) applies them: the audit row, the ledger (a refunded
/// purchase of its own receipt row, as for a purchase no receipt brought), in group-committed
/// transactions. Applied/s from the worker's start until the last audit row is in Postgres, with the
/// worker's and Postgres's CPU per notification.
enum NotificationsRow: BenchRow {
    static let name = "notifications"
    static let summary =
        "POST /apple/notifications (V2 REFUND, two JWS checked) at 50 connections (wrk): accepted/s, p50/p99; one worker applying 20,000: applied/s"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let packages = ["wrk"]
    static let defaultIterations = 3
    static let options = [
        OptionSpec(name: "--seconds", takesValue: true, help: "each measured wrk run (default 10); --iterations runs (default 3)"),
        OptionSpec(name: "--warmup-seconds", takesValue: true, help: "an untimed wrk run first (default 2; 0 = none)"),
        OptionSpec(name: "--connections", takesValue: true, help: "wrk connections (default 50)"),
        OptionSpec(name: "--threads", takesValue: true, help: "wrk threads (default 2)"),
        OptionSpec(name: "--bodies", takesValue: true, help: "distinct notifications for the endpoint runs (default 40000)"),
        OptionSpec(name: "--jobs", takesValue: true, help: "notifications the worker applies (default 20000; 0 = skip)"),
        OptionSpec(name: "--worker-concurrency", takesValue: true, help: "the worker's WORKER_CONCURRENCY (default 64)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
        OptionSpec(name: "--wrk", takesValue: true, help: "the wrk binary (default: wrk on PATH)"),
    ]

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        func number(_ name: String, _ fallback: Double) throws -> Double {
            guard let text = options.extra[name] else { return fallback }
            guard let value = Double(text), value >= 0 else { throw BenchFailure(description: "\(name) needs a number, not \(text)") }
            return value
        }
        let bodies = max(1, Int(try number("--bodies", 40_000)))
        let settings = IngestRow.Settings(
            seconds: max(1, try number("--seconds", 10)), warmup: try number("--warmup-seconds", 2),
            connections: max(1, Int(try number("--connections", 50))), threads: max(1, Int(try number("--threads", 2))),
            runs: options.iterations(default: defaultIterations), syncWaitMs: 0, profileSeconds: 0, receipts: bodies, apps: 1)
        let jobs = Int(try number("--jobs", 20_000))
        let concurrency = max(1, Int(try number("--worker-concurrency", 64)))
        let receiptq = try PipelineRow.locateReceiptq(options.extra["--receiptq"])
        guard let wrk = options.extra["--wrk"] ?? ChildProcess.which("wrk") else {
            throw BenchFailure(description: "wrk not found: install it (scripts/bench does: scripts/setup wrk)")
        }
        let configuration = try AppConfiguration()
        try ReceiptQueueApp.migrate(configuration)
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench")
        defer { postgres.close() }
        let redis = try RedisConnection(configuration: configuration.redis, label: "bench")
        defer { redis.close() }
        let postmaster = PostgresStats.postmasterPID(postgres)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bench-notifications-\(getpid())")
        let trust = directory.appendingPathComponent("trust")
        try FileManager.default.createDirectory(at: trust, withIntermediateDirectories: true)
        let authority = try MockAppleJWSAuthority.generate()
        try authority.root.pem.write(to: trust.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)

        let admin = AppAdmin(connection: postgres)
        let bundleID = "com.example.receiptq.bench.notifications"
        let (app, _) = try admin.addApp(
            name: "bench-notifications-\(UUID().uuidString.prefix(8).lowercased())", bundleID: bundleID, sharedSecret: "s")
        defer { BenchApps.delete([app.id], on: postgres, row: name) }
        let token = try admin.rotateNotificationToken(appID: app.id)
        let path = "/apple/notifications/\(app.name)/\(token)"

        FileHandle.standardError.write(Data("notifications: signing \(max(bodies, jobs)) notifications (two JWS each)…\n".utf8))
        let base = Int.random(in: 1...9_000_000) * 1_000_000_000
        let now = (Date().timeIntervalSince1970 * 1000).rounded()
        var payloads: [String] = []
        for index in 0..<max(bodies, jobs) {
            let transaction = try authority.sign(
                .object([
                    "transactionId": .string(String(base + index)), "originalTransactionId": .string(String(base + index)),
                    "bundleId": .string(bundleID), "productId": .string("com.example.lifetime"), "purchaseDate": .number(now - 86_400_000),
                    "type": .string("Non-Consumable"), "environment": .string("Production"), "revocationDate": .number(now),
                    "revocationReason": .number(1), "signedDate": .number(now),
                ]))
            payloads.append(
                try authority.sign(
                    .object([
                        "notificationType": .string("REFUND"), "notificationUUID": .string(UUID().uuidString.lowercased()),
                        "version": .string("2.0"), "signedDate": .number(now),
                        "data": .object([
                            "bundleId": .string(bundleID), "environment": .string("Production"), "signedTransactionInfo": .string(transaction),
                        ]),
                    ])))
        }
        let bodyBytes = #"{"signedPayload":""#.utf8.count + payloads[0].utf8.count + 2

        // The endpoint, under wrk.
        let prefix = "{rqn-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis) }
        let port = try freeLoopbackPort()
        var environment = ProcessInfo.processInfo.environment
        environment.merge([
            "REDIS_KEY_PREFIX": prefix, "HTTP_HOST": "127.0.0.1", "HTTP_PORT": String(port), "API_SYNC_WAIT_MS": "0",
            "RECEIPTQ_TRUST_ROOTS_DIR": trust.path, "LOG_LEVEL": "warning", "RECEIPTQ_ENV": "development",
        ]) { _, new in new }
        let server = try ChildProcess(executable: receiptq, arguments: ["serve"], environment: environment, label: "serve", logDirectory: directory)
        defer { server.stop(grace: 10) }
        guard Network.waitForListener(port: port, timeout: 30) else {
            throw BenchFailure(description: "receiptq serve did not listen on \(port):\n\(server.logTail())")
        }
        let bodiesFile = directory.appendingPathComponent("bodies.txt")
        let tokensFile = directory.appendingPathComponent("tokens.txt")
        try (payloads.prefix(bodies).map { #"{"signedPayload":"\#($0)"}"# }.joined(separator: "\n") + "\n").write(
            to: bodiesFile, atomically: true, encoding: .utf8)
        try "unused\n".write(to: tokensFile, atomically: true, encoding: .utf8)
        let script = directory.appendingPathComponent("notifications.lua")
        try IngestRow.luaScript(bodies: bodiesFile.path, tokens: tokensFile.path, threads: settings.threads, path: path).write(
            to: script, atomically: true, encoding: .utf8)
        let wrkCommand = IngestRow.WrkCommand(wrk: wrk, script: script.path, url: "http://127.0.0.1:\(port)\(path)", settings: settings)
        let context = IngestRow.RunContext(
            server: server, redis: redis, postgres: postgres, postmaster: postmaster, keys: keys, prefix: prefix, queueKind: .notification)
        if settings.warmup > 0 {
            _ = try wrkCommand.run(seconds: settings.warmup)
            _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis)
        }
        var runs: [[String: Any]] = []
        for index in 1...settings.runs {
            FileHandle.standardError.write(Data("notifications: endpoint run \(index)/\(settings.runs)…\n".utf8))
            runs.append(try IngestRow.measure(wrkCommand, seconds: settings.seconds, context: context))
            guard server.isRunning else { throw BenchFailure(description: "receiptq serve exited:\n\(server.logTail())") }
        }

        // One worker applying `jobs` queued notifications.
        var worker: [String: Any] = [:]
        if jobs > 0 {
            FileHandle.standardError.write(Data("notifications: one worker applying \(jobs)…\n".utf8))
            worker = try applyRun(
                payloads: Array(payloads.prefix(jobs)), app: app, bundleID: bundleID, concurrency: concurrency, receiptq: receiptq,
                environment: environment, keys: keys, redis: redis, postgres: postgres, postmaster: postmaster, directory: directory)
        }
        return report(runs: runs, worker: worker, settings: settings, jobs: jobs, concurrency: concurrency, bodyBytes: bodyBytes)
    }

    static func applyRun(
        payloads: [String], app: AppRecord, bundleID: String, concurrency: Int, receiptq: URL, environment: [String: String], keys: RedisKeys,
        redis: RedisConnection, postgres: PostgresConnection, postmaster: Int32?, directory: URL
    ) throws -> [String: Any] {
        _ = try? RedisCleanup.deleteKeys(prefix: keys.prefix, redis)
        for batch in stride(from: 0, to: payloads.count, by: 500) {
            _ = try redis.pipeline(
                bytes: (batch..<min(batch + 500, payloads.count)).map { index in
                    let envelope = JobEnvelope(
                        id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .apple,
                        payload: .notification(
                            NotificationJob(
                                notificationID: "bench-\(index)-\(app.id)", body: payloads[index], bundleID: bundleID, environment: "production")
                        ))
                    return [Array("LPUSH".utf8), Array(keys.queue("notification").utf8), envelope.encoded()]
                })
        }
        func stored() throws -> Int {
            try postgres.query("SELECT count(*) AS n FROM notifications WHERE app_id = \(app.id)").rows.first?.int("n") ?? -1
        }
        let before = try stored()
        var workerEnvironment = environment
        workerEnvironment["WORKER_CONCURRENCY"] = String(concurrency)
        let pgBefore = postmaster.map { ProcessStats.familyCPU(parent: $0) } ?? [:]
        let machineBefore = MachineCPU.sample()
        let started = BenchClock.wall()
        let process = try ChildProcess(
            executable: receiptq, arguments: ["work"], environment: workerEnvironment, label: "work", logDirectory: directory)
        defer { process.stop(grace: 10) }
        var workerCPU = 0.0
        let deadline = Date().addingTimeInterval(600)
        while try stored() - before < payloads.count, Date() < deadline {
            workerCPU = ProcessStats.cpuMicros(pid: process.pid) ?? workerCPU
            usleep(50_000)
        }
        workerCPU = ProcessStats.cpuMicros(pid: process.pid) ?? workerCPU
        let seconds = Double(BenchClock.wall() - started) / 1e9
        let applied = try stored() - before
        let pgCPU = postmaster == nil ? Double.nan : ProcessStats.familyDelta(pgBefore, ProcessStats.familyCPU(parent: postmaster!))
        let machine = MachineCPU.shares(machineBefore, MachineCPU.sample())
        let memory = ProcessStats.memory(pid: process.pid)
        return [
            "applied": applied, "seconds": Format.json(seconds, places: 1_000),
            "applied_per_s": Format.json(Double(applied) / seconds),
            "worker_cpu_us_per_notification": Format.json(workerCPU / Double(max(applied, 1))),
            "postgres_cpu_us_per_notification": Format.json(pgCPU / Double(max(applied, 1))),
            "worker_peak_rss_mb": Format.json(Double(memory?.hwmKiB ?? 0) / 1_024), "machine_busy_pct": Format.json(machine.busy),
            "dead": try redis.send(["ZCARD", keys.dead]).int ?? -1,
        ]
    }

    static func report(
        runs: [[String: Any]], worker: [String: Any], settings: IngestRow.Settings, jobs: Int, concurrency: Int, bodyBytes: Int
    ) -> [String: Any] {
        func values(_ key: String) -> [Double] { runs.map { ($0[key] as? Double) ?? ($0[key] as? Int).map(Double.init) ?? .nan } }
        func med(_ key: String, places: Double = 10) -> Double { Format.json(median(values(key)), places: places) }
        let errors = runs.reduce(0) { $0 + (($1["errors"] as? Int) ?? 0) }
        let repeated = runs.contains { (($0["requests"] as? Int) ?? 0) > settings.receipts }
        var result: [String: Any] = [
            "rps": med("rps"), "p50_ms": med("p50_ms", places: 1_000), "p99_ms": med("p99_ms", places: 1_000), "errors": errors,
            "all_2xx_queued": runs.allSatisfy { $0["all_2xx_queued"] as? Bool == true }, "bodies_repeated": repeated,
            "server_cpu_us_per_req": med("server_cpu_us_per_req"), "server_cpu_pct": med("server_cpu_pct"),
            "redis_cpu_pct": med("redis_cpu_pct"), "wrk_cpu_pct": med("wrk_cpu_pct"), "machine_busy_pct": med("machine_busy_pct"),
            "runs": runs, "worker": worker, "connections": settings.connections, "wrk_threads": settings.threads,
            "window_s": settings.seconds, "distinct_bodies": settings.receipts, "body_bytes": bodyBytes, "worker_concurrency": concurrency,
            "method": [
                "rps, p50_ms, p99_ms": "median over the runs (wrk, exact percentiles); 200 only once the job is in Redis",
                "applied_per_s": "one receiptq work process, from its start until the last audit row of --jobs queued notifications",
            ],
        ]
        if worker.isEmpty { result["worker"] = nil }
        var table = TextTable(
            title:
                "notifications: POST of a V2 REFUND (\(bodyBytes) B, two JWS checked), wrk \(settings.threads) threads × \(settings.connections) connections, \(Format.json(settings.seconds)) s runs",
            headers: ["run", "accepted/s", "p50 ms", "p99 ms", "non-2xx", "server CPU %", "µs/req", "redis CPU %", "wrk CPU %", "machine busy %", ""])
        func row(_ label: String, _ run: [String: Any]) -> [String] {
            func cell(_ key: String) -> String { Format.micros((run[key] as? Double) ?? (run[key] as? Int).map(Double.init) ?? .nan) }
            let flagged = ((run["errors"] as? Int) ?? 0) > 0 || run["all_2xx_queued"] as? Bool == false
            return [
                label, Format.rate((run["rps"] as? Double) ?? .nan), cell("p50_ms"), cell("p99_ms"), (run["non_2xx"] as? Int).map(String.init) ?? "-",
                cell("server_cpu_pct"), cell("server_cpu_us_per_req"), cell("redis_cpu_pct"), cell("wrk_cpu_pct"), cell("machine_busy_pct"),
                flagged ? "ERRORS" : "",
            ]
        }
        for (index, run) in runs.enumerated() { table.add(row("run \(index + 1)", run)) }
        var medianRow = row("median", result)
        medianRow[4] = "\(runs.reduce(0) { $0 + (($1["non_2xx"] as? Int) ?? 0) })"
        table.add(medianRow)
        if !worker.isEmpty {
            table.notes.append(
                "one worker (WORKER_CONCURRENCY \(concurrency)) applied \(worker["applied"] ?? "?") of \(jobs) in \(worker["seconds"] ?? "?") s: "
                    + "\(worker["applied_per_s"] ?? "?") notifications/s, worker \(worker["worker_cpu_us_per_notification"] ?? "?") µs and "
                    + "Postgres \(worker["postgres_cpu_us_per_notification"] ?? "?") µs CPU each, machine \(worker["machine_busy_pct"] ?? "?") % busy, "
                    + "\(worker["dead"] ?? "?") dead")
        }
        if repeated { table.notes.append("ERRORS: a run sent more than \(settings.receipts) requests: raise --bodies") }
        if errors > 0 { table.notes.append("ERRORS: \(errors) non-2xx or socket errors") }
        table.notes.append("compare with `ingest` (the receipts endpoint) measured in the same session: scripts/bench ingest notifications")
        print(table.render())
        return result
    }
}
