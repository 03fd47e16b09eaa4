import Curl
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

extension IngestRow {

    /// What a run measures: the server's processes (receiptq's one, or the Python peer's), the
    /// servers around them, and the list every 2xx answer's job must be in.
    struct RunContext {
        let servers: [Int32]
        let redis: RedisConnection
        let postgres: PostgresConnection
        let postmaster: Int32?
        /// Every key of the run starts with it: deleted after each run, so the pairs are new again.
        let prefix: String
        let queue: String
        /// Jobs each 2xx answer queues (a batch's items; 1 for a single POST).
        var itemsPerRequest = 1

        init(servers: [Int32], redis: RedisConnection, postgres: PostgresConnection, postmaster: Int32?, prefix: String, queue: String) {
            self.servers = servers
            self.redis = redis
            self.postgres = postgres
            self.postmaster = postmaster
            self.prefix = prefix
            self.queue = queue
        }

        /// `receiptq serve`, whose 2xx answers are jobs in the `kind` queue.
        init(
            server: ChildProcess, redis: RedisConnection, postgres: PostgresConnection, postmaster: Int32?, keys: RedisKeys, prefix: String,
            queueKind: JobKind = .validate
        ) {
            self.init(
                servers: [server.pid], redis: redis, postgres: postgres, postmaster: postmaster, prefix: prefix,
                queue: keys.queue(queueKind.rawValue))
        }
    }

    struct Snapshot {
        var wall = BenchClock.wall()
        var server: Double?
        var serverSystem: Double?
        var serverSwitches: (voluntary: Int, involuntary: Int)?
        var redis: RedisStats
        var postgres: [Int32: Double]
        var children = IngestRow.childrenCPUMicros()
        var machine = MachineCPU.sample()

        init(_ context: RunContext) throws {
            let times = context.servers.compactMap { ProcessStats.cpuTimes(pid: $0) }
            if times.count == context.servers.count {
                server = times.reduce(0) { $0 + $1.user + $1.system }
                serverSystem = times.reduce(0) { $0 + $1.system }
            }
            let switches = context.servers.compactMap { ProcessStats.contextSwitches(pid: $0) }
            serverSwitches = switches.count < context.servers.count ? nil : switches.reduce((0, 0)) { ($0.0 + $1.0, $0.1 + $1.1) }
            redis = try RedisStats.sample(context.redis)
            postgres = context.postmaster.map { ProcessStats.familyCPU(parent: $0) } ?? [:]
        }
    }

    /// CPU of this process's reaped children (wrk, once it has exited), µs.
    static func childrenCPUMicros() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage)
        func micros(_ time: timeval) -> Double { Double(time.tv_sec) * 1_000_000 + Double(time.tv_usec) }
        return micros(usage.ru_utime) + micros(usage.ru_stime)
    }

    static func measure(_ wrk: WrkCommand, seconds: Double, context: RunContext) throws -> [String: Any] {
        let queue = context.queue
        let before = try Snapshot(context)
        let report = try wrk.run(seconds: seconds)
        let after = try Snapshot(context)
        // Requests still in flight when wrk stopped may land a moment later: let them, then count the jobs.
        usleep(300_000)
        let queued = try context.redis.send(["LLEN", queue]).int ?? -1
        _ = try? RedisCleanup.deleteKeys(prefix: context.prefix, context.redis)

        let wall = Double(after.wall - before.wall)  // ns
        func pct(_ micros: Double) -> Double { Format.json(100 * micros * 1_000 / wall) }
        let requests = Double(max(report.requests, 1))
        let serverCPU = after.server.flatMap { a in before.server.map { a - $0 } } ?? .nan
        let serverSystemCPU = after.serverSystem.flatMap { a in before.serverSystem.map { a - $0 } } ?? .nan
        let redisCPU = (after.redis.cpuSeconds - before.redis.cpuSeconds) * 1_000_000
        let postgresCPU = context.postmaster == nil ? Double.nan : ProcessStats.familyDelta(before.postgres, after.postgres)
        let wrkCPU = after.children - before.children
        let machine = MachineCPU.shares(before.machine, after.machine)
        // Summed over the server's processes (the peer runs one per core).
        let memories = context.servers.compactMap { ProcessStats.memory(pid: $0) }
        let memory =
            memories.isEmpty
            ? nil
            : ProcessStats.Memory(
                rssKiB: memories.reduce(0) { $0 + $1.rssKiB }, hwmKiB: memories.reduce(0) { $0 + $1.hwmKiB },
                threads: memories.reduce(0) { $0 + $1.threads })
        let commands = RedisStats.callDelta(before.redis, after.redis)
        var commandsPerRequest: [String: Any] = [:]
        for (name, calls) in commands { commandsPerRequest[name] = Format.json(calls / requests, places: 1_000) }
        let switches = Double(
            (after.serverSwitches?.voluntary ?? 0) - (before.serverSwitches?.voluntary ?? 0)
                + (after.serverSwitches?.involuntary ?? 0) - (before.serverSwitches?.involuntary ?? 0))

        return [
            "rps": Format.json(report.rps),
            "requests": report.requests,
            "duration_s": Format.json(report.durationSeconds, places: 1_000),
            "p50_ms": Format.json(report.latency["p50"].map { $0 / 1_000 } ?? .nan, places: 1_000),
            "p90_ms": Format.json(report.latency["p90"].map { $0 / 1_000 } ?? .nan, places: 1_000),
            "p99_ms": Format.json(report.latency["p99"].map { $0 / 1_000 } ?? .nan, places: 1_000),
            "p999_ms": Format.json(report.latency["p999"].map { $0 / 1_000 } ?? .nan, places: 1_000),
            "max_ms": Format.json(report.latency["max"].map { $0 / 1_000 } ?? .nan, places: 1_000),
            "mean_ms": Format.json(report.latency["mean"].map { $0 / 1_000 } ?? .nan, places: 1_000),
            "statuses": report.statuses,
            "non_2xx": report.non2xx,
            "socket_errors": report.socketErrors,
            "errors": report.non2xx + report.socketErrors.values.reduce(0, +),
            "jobs_queued": queued,
            "all_2xx_queued": queued >= report.ok * context.itemsPerRequest,
            "items_per_s": Format.json(report.rps * Double(context.itemsPerRequest)),
            "server_cpu_pct": pct(serverCPU),
            "server_cpu_us_per_req": Format.json(serverCPU / requests),
            "server_sys_us_per_req": Format.json(serverSystemCPU / requests),
            "server_rss_mb": Format.json(Double(memory?.rssKiB ?? 0) / 1_024),
            "server_peak_rss_mb": Format.json(Double(memory?.hwmKiB ?? 0) / 1_024),
            "server_threads": memory?.threads ?? -1,
            "server_context_switches_per_req": Format.json(switches / requests, places: 100),
            "redis_cpu_pct": pct(redisCPU),
            "redis_cpu_us_per_req": Format.json(redisCPU / requests),
            "redis_commands_per_req": commandsPerRequest,
            "redis_net_in_bytes_per_req": Format.json((after.redis.netInputBytes - before.redis.netInputBytes) / requests),
            "postgres_cpu_pct": pct(postgresCPU),
            "wrk_cpu_pct": pct(wrkCPU),
            "wrk_cpu_us_per_req": Format.json(wrkCPU / requests),
            "machine_busy_pct": Format.json(machine.busy),
            "load_average_after": Machine.loadAverage(),
        ]
    }

    /// One more run with `perf record` of the server and Redis in its middle (not in the medians).
    static func profileRun(_ wrk: WrkCommand, seconds: Int, context: RunContext, directory: URL) throws -> [String: Any] {
        let load = try wrk.start(seconds: Double(seconds) + 2, logDirectory: directory)
        usleep(1_000_000)
        var pids = context.servers
        if let redis = try RedisStats.sample(context.redis).processID,
            ((try? String(contentsOfFile: "/proc/\(redis)/comm", encoding: .utf8)) ?? "").hasPrefix("redis")
        {
            pids.append(redis)
        }
        let perf = PerfProfile.record(pids: pids, seconds: seconds, directory: directory)
        load.waitUntilExit()
        _ = try? RedisCleanup.deleteKeys(prefix: context.prefix, context.redis)
        return perf
    }
}
