import Curl
import Foundation
import Hiredis
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue

// One level of the pipeline row: workers started, a window sampled, the numbers of that window.
extension PipelineRow {
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
        // A Server API job makes its calls one after the other, each at the mock's latency; a job
        // that makes none (local trust) waits on nothing, so only the CPU bounds it: no ideal, and
        // the feeder is sized as for one call.
        let callsPerJob = spec.serverAPIJobs?.calls ?? 1
        let ideal = Double(processes * concurrency) * context.idealPerLane / Double(max(1, callsPerJob))
        var level: [String: Any] = [
            "concurrency": concurrency, "processes": processes, "in_flight_max": processes * concurrency,
            "ideal_rps": callsPerJob == 0 ? -1 : Format.json(ideal),
        ]
        if let jobs = spec.serverAPIJobs { level["server_api_jobs"] = jobs.rawValue }

        // The shared machine first: other people's builds would otherwise be measured with us.
        let quiet = waitForQuiet(context, key: spec.key)
        level["load_wait_s"] = Format.json(quiet.waited)
        level["load_quiet"] = quiet.quiet
        level["load_average_before"] = Machine.loadAverage()

        let label = spec.key.replacingOccurrences(of: "_", with: "-")
        let apps: [AppRecord]
        guard let receipt = context.receipt else { throw BenchFailure(description: "no receipt template") }
        var signedPool: [String]?
        if let jobs = spec.serverAPIJobs {
            guard let setup = context.serverAPI else { throw BenchFailure(description: "no Server API setup") }
            apps = try makeServerAPIApps(context, setup, label: label, jobs: jobs)
            level["apps"] = apps.count
            if jobs != .first {
                signedPool = try signServerAPIPool(context, setup, apps: apps, tag: receipt.tag, knownCustomers: jobs == .known)
                level["signed_pool"] = signedPool?.count
            }
        } else {
            apps = [try context.fixedApp ?? context.makeApp(label)]
        }
        // The level's receipts, whichever apps they belong to.
        let scope = "{" + apps.map(\.id.uuidString).joined(separator: ",") + "}"
        // This level's receipts: a fixed app holds earlier levels' too, which retention may be
        // deleting meanwhile; every job of the level is enqueued (its receipt created) after this.
        let levelStart = Date()
        func counted() throws -> (n: Int, valid: Int) {
            let row = try context.postgres.query(
                """
                SELECT count(*) AS n, count(*) FILTER (WHERE status = 'valid') AS valid FROM receipts
                WHERE app_id = ANY(\(scope)::uuid[]) AND created_at >= \(levelStart)
                """
            ).rows.first
            return (row?.int("n") ?? 0, row?.int("valid") ?? 0)
        }
        let factory = try JobFactory(
            receipt: receipt, appIDs: apps.map(\.id), transactionIDs: spec.serverAPI, signedPool: signedPool,
            population: spec.serverAPI ? nil : context.population)
        let prefix = "{rqb-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, context.redis) }

        // Every process on the same prefix: one queue, as replicas share it in production.
        var workers: [ChildProcess] = []
        var workersStopped = false
        defer { if !workersStopped { for worker in workers { worker.stop(grace: 5) } } }
        // Each worker exports its stage histograms, read before and after the window.
        let metricsPorts = try (0..<processes).map { _ in try freeLoopbackPort() }
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
            (stored, valid) = try counted()
            if stored >= pushed { break }
            usleep(200_000)
        } while Date() < drainBy
        let watched = watcher.stop()
        watcherStopped = true
        context.observations? += watched.observations
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
                "pct_of_ideal": callsPerJob == 0 ? -1 : Format.json(100 * rps / ideal),
                "p50_ms": Format.json(done.p50 / 1_000, places: 100),
                "p99_ms": Format.json(done.p99 / 1_000, places: 100),
                "latency_samples": done.count,
                "latency_samples_unseen": watched.unseen,
                "validated_p50_ms": Format.json(validated?.double("p50") ?? .nan, places: 100),
                "validated_p99_ms": Format.json(validated?.double("p99") ?? .nan, places: 100),
                // Measured, not assumed: the calls the stored attempts record, per validation of the window.
                "apple_calls_per_validation": Format.json(Double(apple?.int("calls") ?? 0) / Double(max(jobs, 1)), places: 100),
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
}
