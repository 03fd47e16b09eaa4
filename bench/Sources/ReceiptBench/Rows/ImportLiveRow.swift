import Foundation
import Hiredis
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue

/// `import_live`: what a running bulk import costs live purchases. One `receiptq work` (release)
/// at `--concurrency` (100) against the mock App Store at `--latency-ms` (50); live jobs arrive at a
/// steady `--rate` (600/s: under a third of the ideal 2,000/s, so the workers have the spare
/// slots an import takes) and each one's latency is timed from its push to its result on the
/// reply channel (after the Postgres commit, as a waiting API request sees it). Runs alternate
/// between a quiet system and one whose import queue holds `--import-jobs` (20,000) validations
/// of another app, served under the import lane's rules (`--import-share`, 25 %, and the app's
/// import budget `--import-rate`, 50/s as in production; 0 lifts it: the import's worst case for
/// live traffic). Each run starts its own worker on a fresh key
/// prefix. Target: live p99 with the import ≤ 1.10× without, in the same run.
///
/// A run with the import is flagged when its import queue ran empty before the window ended (the
/// live jobs would not all have been measured beside it), and any run whose sampled jobs did not
/// all come back within 30 s is flagged.
enum ImportLiveRow: BenchRow {
    static let name = "import_live"
    static let summary =
        "live validations' latency (p50/p99) at a steady rate, without and with a 20,000-job bulk import queued: one worker at c100, mock at 50 ms"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let defaultIterations = 3
    static let options = [
        OptionSpec(name: "--rate", takesValue: true, help: "live jobs per second (default 600)"),
        OptionSpec(name: "--seconds", takesValue: true, help: "each measured window (default 10), after 2 s of the same load unmeasured"),
        OptionSpec(name: "--concurrency", takesValue: true, help: "the worker's WORKER_CONCURRENCY (default 100)"),
        OptionSpec(name: "--latency-ms", takesValue: true, help: "the mock App Store's answer time (default 50)"),
        OptionSpec(
            name: "--import-jobs", takesValue: true, help: "validations queued in the import queue for the runs with an import (default 20000)"),
        OptionSpec(name: "--import-share", takesValue: true, help: "the worker's IMPORT_SHARE_PERCENT (default 25)"),
        OptionSpec(
            name: "--import-rate", takesValue: true, help: "the worker's IMPORT_RATE_PER_SECOND (default 50, the production default; 0 = none)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
    ]

    struct Window {
        var latencies: [UInt64]
        var unseen: Int
        var importLeft: Int?
        var importDone: Int?

        var distribution: Distribution { Distribution(nanoseconds: latencies) }
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let rate = Double(try options.positive("--rate", default: 600))
        let seconds = Double(try options.positive("--seconds", default: 10))
        let concurrency = try options.positive("--concurrency", default: 100)
        let latencyMs = try options.positive("--latency-ms", default: 50)
        let importJobs = try options.positive("--import-jobs", default: 20_000)
        let share = try options.positive("--import-share", default: 25)
        let importRate =
            try options.extra["--import-rate"].map { text -> Int in
                // 0 lifts the budget, so not `positive`; anything else but a count is refused, not read as 50.
                guard let value = Int(text), value >= 0 else {
                    throw BenchFailure(description: "--import-rate needs a whole number ≥ 0, not \(text)")
                }
                return value
            } ?? 50
        let runs = options.iterations(default: defaultIterations)

        let receiptq = try PipelineRow.locateReceiptq(options.extra["--receiptq"])
        let configuration = try AppConfiguration()
        try ReceiptQueueApp.migrate(configuration)
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench")
        defer { postgres.close() }
        let redis = try RedisConnection(configuration: configuration.redis, label: "bench")
        defer { redis.close() }
        let context = PipelineRow.Context(
            configuration: configuration, postgres: postgres, redis: redis, receiptq: receiptq, latencyMs: latencyMs, warmup: 0, seconds: seconds)
        context.label = name
        try PipelineRow.startMock(context)
        defer {
            context.mock?.stop(grace: 5)
            PipelineRow.cleanup(context)
        }
        FileHandle.standardError.write(Data("\(name): forging the receipt…\n".utf8))
        let receipt = try JobFactory.forgeReceipt(bundleID: PipelineRow.Context.bundleID)
        let live = try JobFactory(receipt: receipt, appID: try context.makeApp("import-live").id)
        let imported = try JobFactory(receipt: receipt, appID: try context.makeApp("import-backfill").id)
        // Disjoint serials: no live job is an imported job's purchase.
        var liveSerial = 0
        var importSerial = 100_000_000

        var quiet: [Window] = []
        var busy: [Window] = []
        for index in 0..<runs {
            // Alternating which goes first, so the machine's drift falls on both alike.
            for withImport in index.isMultiple(of: 2) ? [false, true] : [true, false] {
                FileHandle.standardError.write(
                    Data("\(name): run \(index + 1)/\(runs) \(withImport ? "with" : "without") an import (\(Int(seconds)) s)…\n".utf8))
                let window = try measure(
                    context, live: live, liveSerial: &liveSerial, imported: withImport ? imported : nil, importSerial: &importSerial,
                    importJobs: importJobs, rate: rate, seconds: seconds, concurrency: concurrency, share: share, importRate: importRate)
                if withImport { busy.append(window) } else { quiet.append(window) }
            }
        }
        return report(
            quiet: quiet, busy: busy, rate: rate, seconds: seconds, concurrency: concurrency, latencyMs: latencyMs, importJobs: importJobs,
            share: share, importRate: importRate)
    }

    /// One window: a fresh worker, the import queued (or not), live jobs at `rate` for 2 s
    /// unmeasured and then `seconds` measured.
    static func measure(
        _ context: PipelineRow.Context, live: JobFactory, liveSerial: inout Int, imported: JobFactory?, importSerial: inout Int,
        importJobs: Int, rate: Double, seconds: Double, concurrency: Int, share: Int, importRate: Int
    ) throws -> Window {
        let prefix = "{rqil-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, context.redis) }
        let importQueue = keys.queue(JobEnvelope.importQueue)
        if let imported {
            // The backfill's validations, as the batch endpoint queues them (no one waits on them).
            let importID = JobID.make()
            var pushed = 0
            while pushed < importJobs {
                var command: [[UInt8]] = [Array("LPUSH".utf8), Array(importQueue.utf8)]
                for _ in 0..<min(1_000, importJobs - pushed) {
                    var envelope = try JobEnvelope.decode(imported.makeJob(serial: importSerial, now: Date()).bytes)
                    if let purchase = envelope.payload.purchase {
                        envelope.payload = .importItem(ImportItem(importID: importID, emitsEvents: false, purchase: purchase))
                    }
                    envelope.replyTo = nil
                    command.append(envelope.encoded())
                    importSerial += 1
                    pushed += 1
                }
                _ = try context.redis.send(bytes: command)
            }
        }
        var environment = context.workerEnvironment(prefix: prefix, concurrency: concurrency)
        environment["IMPORT_SHARE_PERCENT"] = String(share)
        environment["IMPORT_RATE_PER_SECOND"] = String(importRate)
        let worker = try ChildProcess(
            executable: context.receiptq, arguments: ["work"], environment: environment, label: "worker-\(prefix.dropFirst().dropLast())",
            logDirectory: context.logDirectory)
        defer { worker.stop(grace: 5) }
        let readyBy = Date().addingTimeInterval(30)
        while Date() < readyBy, worker.isRunning, (try context.redis.send(["SCARD", keys.workers]).int ?? 0) < 1 { usleep(50_000) }
        guard worker.isRunning else { throw BenchFailure(description: "receiptq work exited:\n\(worker.logTail())") }

        let watcherRedis = try RedisConnection(configuration: context.configuration.redis, label: "bench-watcher")
        defer { watcherRedis.close() }
        let watcher = ResultWatcher(redis: watcherRedis, keys: keys)
        try watcher.start()
        let queue = keys.queue(JobKind.validate.rawValue)
        let warmup: Double = 2
        let started = BenchClock.wall()
        var pushed = 0
        var importAtStart: Int?
        // Paced, not backlogged: live traffic arrives at its own rate whatever the workers do.
        while true {
            let elapsed = Double(BenchClock.wall() &- started) / 1e9
            if elapsed >= warmup + seconds { break }
            if importAtStart == nil, elapsed >= warmup { importAtStart = try context.redis.send(["LLEN", importQueue]).int ?? 0 }
            let due = Int(rate * elapsed) - pushed
            if due > 0 {
                var command: [[UInt8]] = [Array("LPUSH".utf8), Array(queue.utf8)]
                var ids: [String] = []
                let now = Date()
                for _ in 0..<due {
                    let job = live.makeJob(serial: liveSerial, now: now)
                    liveSerial += 1
                    command.append(job.bytes)
                    ids.append(job.id.canonical)
                }
                let at = BenchClock.wall()
                _ = try context.redis.send(bytes: command)
                // Only the measured window's jobs are timed.
                if elapsed >= warmup { watcher.expect(ids, pushedAt: at) }
                pushed += due
            }
            usleep(2_000)
        }
        let importLeft = try context.redis.send(["LLEN", importQueue]).int ?? 0
        // Every measured job's result, or 30 s.
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, (try context.redis.send(["LLEN", queue]).int ?? 0) > 0 { usleep(50_000) }
        usleep(500_000)
        let (observations, unseen) = watcher.stop()
        return Window(
            latencies: observations.map(\.latency), unseen: unseen, importLeft: imported == nil ? nil : importLeft,
            importDone: imported == nil ? nil : (importAtStart ?? importLeft) - importLeft)
    }

    static func report(
        quiet: [Window], busy: [Window], rate: Double, seconds: Double, concurrency: Int, latencyMs: Int, importJobs: Int, share: Int,
        importRate: Int
    ) -> [String: Any] {
        func ms(_ micros: Double) -> String { String(format: "%.1f", micros / 1_000) }
        var table = TextTable(
            title: "import_live: live jobs at \(Int(rate))/s on one worker at c\(concurrency) (mock \(latencyMs) ms), push → result ms, "
                + "without and with \(importJobs) import jobs queued (IMPORT_SHARE_PERCENT \(share), IMPORT_RATE_PER_SECOND \(importRate)); \(Int(seconds)) s windows",
            headers: ["run", "live jobs", "p50 quiet", "p99 quiet", "p50 import", "p99 import", "p99 ×", "import done/s", "import left", "flags"])
        var runs: [[String: Any]] = []
        var ratios: [Double] = []
        for (index, (without, with)) in zip(quiet, busy).enumerated() {
            let (a, b) = (without.distribution, with.distribution)
            let ratio = b.p99 / a.p99
            ratios.append(ratio)
            var flags: [String] = []
            if with.importLeft == 0 { flags.append("import drained") }
            if without.unseen + with.unseen > 0 { flags.append("\(without.unseen + with.unseen) unseen") }
            table.add([
                "\(index + 1)", "\(a.count)/\(b.count)", ms(a.p50), ms(a.p99), ms(b.p50), ms(b.p99), String(format: "%.2f", ratio),
                Format.rate(Double(with.importDone ?? 0) / seconds), "\(with.importLeft ?? 0)", flags.joined(separator: ", "),
            ])
            runs.append([
                "quiet": ["count": a.count, "p50_ms": Format.json(a.p50 / 1_000), "p99_ms": Format.json(a.p99 / 1_000), "unseen": without.unseen],
                "import": [
                    "count": b.count, "p50_ms": Format.json(b.p50 / 1_000), "p99_ms": Format.json(b.p99 / 1_000), "unseen": with.unseen,
                    "import_done_per_s": Format.json(Double(with.importDone ?? 0) / seconds), "import_left": with.importLeft ?? 0,
                ],
                "p99_ratio": Format.json(ratio, places: 100), "flags": flags,
            ])
        }
        let medianRatio = median(ratios)
        let p50Ratio = median(zip(quiet, busy).map { $1.distribution.p50 / $0.distribution.p50 })
        table.notes.append(
            "live p99 with the import ÷ without: median \(String(format: "%.2f", medianRatio))× (runs "
                + ratios.map { String(format: "%.2f", $0) }.joined(separator: ", ") + "), p50 \(String(format: "%.2f", p50Ratio))×; "
                + "target ≤ 1.10×: \(medianRatio <= 1.10 ? "met" : "not met")")
        print(table.render())
        return [
            "rate": rate, "seconds": seconds, "concurrency": concurrency, "latency_ms": latencyMs, "import_jobs": importJobs,
            "import_share_percent": share, "import_rate_per_second": importRate, "runs": runs,
            "p99_ratio_median": Format.json(medianRatio, places: 100),
            "p50_ratio_median": Format.json(p50Ratio, places: 100), "target": "live p99 with an import ≤ 1.10× without",
            "target_met": medianRatio <= 1.10,
        ]
    }
}
