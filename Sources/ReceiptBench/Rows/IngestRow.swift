import Curl
import Foundation
import Hiredis
import Libpq
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature
import RedisJobQueue

/// `ingest`: `POST /client/itunes_connect/receipts` under load, as a client backend sends receipts.
///
/// The server is `receiptq serve` (release build) in its own process, on Redis and Postgres from
/// scripts/services, with a fresh `REDIS_KEY_PREFIX` and `API_SYNC_WAIT_MS=0`: no worker runs, so
/// each POST is answered 206 as soon as its job is durably in Redis. This measures ingestion (auth,
/// body, local decode and signature check, the Redis write), not Apple. `RECEIPTQ_TRUST_ROOTS_DIR`
/// holds only the root of a test CA generated for the run, which signed every receipt: the server
/// must accept them all (a 402 is an error here).
///
/// The API keeps one job per (receipt, app) for a day and answers a repeat from it, so the load is
/// made of new pairs: `--receipts` (500) distinct unified receipts of ~4 KB of DER, each forged and
/// signed, and `--apps` (200) apps of their bundle id with a token each. `wrk` (a Debian package;
/// scripts/bench installs it) keeps `--connections` (50) keep-alive connections on `--threads` (2)
/// threads; its Lua script POSTs the pairs in turn (receipts × apps per run before any repeat), counts
/// every response by status and prints wrk's exact latency percentiles as JSON. After an untimed
/// warm-up run, `--iterations` (3) runs of `--seconds` (10) each; the row reports the median of each
/// number over the runs. Any response that is not 2xx, any socket error or timeout, a run with fewer
/// queued jobs than 2xx answers, or one longer than receipts × apps requests, flags the run.
///
/// Around each run: the CPU (utime+stime) and peak RSS of the server, Redis's CPU (`INFO cpu`) and
/// commands, Postgres's CPU (its processes in `/proc`), wrk's own CPU (it shares the 2 cores), the
/// machine's busy share, and the jobs in the Redis queue. The run's keys are deleted after each run
/// (so pairs are new again), the apps at the end. With perf installed, one more run is profiled
/// (`perf record` of the server and Redis) unless `--profile-seconds 0`.
enum IngestRow: BenchRow {
    static let name = "ingest"
    static let summary =
        "receiptq serve (own process): POST of a 4 KB unified receipt at 50 connections (wrk), answered 206 once queued: req/s, p50/p99 ms"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let packages = ["wrk"]
    static let defaultIterations = 3
    static let options = [
        OptionSpec(name: "--seconds", takesValue: true, help: "each measured wrk run (default 10); --iterations runs (default 3)"),
        OptionSpec(name: "--warmup-seconds", takesValue: true, help: "an untimed wrk run first (default 3; 0 = none)"),
        OptionSpec(name: "--connections", takesValue: true, help: "wrk connections (default 50)"),
        OptionSpec(name: "--threads", takesValue: true, help: "wrk threads (default 2)"),
        OptionSpec(name: "--sync-wait-ms", takesValue: true, help: "the server's API_SYNC_WAIT_MS (default 0: no worker runs)"),
        OptionSpec(name: "--profile-seconds", takesValue: true, help: "perf record server + Redis during one extra run (default 6; 0 = none)"),
        OptionSpec(name: "--receipts", takesValue: true, help: "distinct receipts, each forged and signed (default 500)"),
        OptionSpec(name: "--apps", takesValue: true, help: "apps (tokens) of the receipts' bundle id (default 200)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
        OptionSpec(name: "--wrk", takesValue: true, help: "the wrk binary (default: wrk on PATH)"),
        OptionSpec(name: "--keep-data", takesValue: false, help: "keep the bench's app in Postgres"),
    ]

    static let bundleID = "com.example.receiptq.bench"
    static let path = "/client/itunes_connect/receipts"

    struct Settings {
        var seconds: Double
        var warmup: Double
        var connections: Int
        var threads: Int
        var runs: Int
        var syncWaitMs: Int
        var profileSeconds: Int
        var receipts: Int
        var apps: Int
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        func number(_ name: String, _ fallback: Double) throws -> Double {
            guard let text = options.extra[name] else { return fallback }
            guard let value = Double(text), value >= 0 else { throw BenchFailure(description: "\(name) needs a number, not \(text)") }
            return value
        }
        let settings = Settings(
            seconds: max(1, try number("--seconds", 10)), warmup: try number("--warmup-seconds", 3),
            connections: max(1, Int(try number("--connections", 50))), threads: max(1, Int(try number("--threads", 2))),
            runs: options.iterations(default: defaultIterations), syncWaitMs: Int(try number("--sync-wait-ms", 0)),
            profileSeconds: Int(try number("--profile-seconds", 6)), receipts: max(1, Int(try number("--receipts", 500))),
            apps: max(1, Int(try number("--apps", 200))))
        guard settings.connections >= settings.threads else { throw BenchFailure(description: "--connections must be ≥ --threads") }

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
        // How often Redis looks at blocked clients' timeouts (its server cron): a short BLPOP ends late.
        let redisHz = (try? redis.send(["CONFIG", "GET", "hz"]))?.array?.last?.string.flatMap { Int($0) } ?? -1

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bench-ingest-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)

        // The receipt, and a trust directory holding only the root that signed it.
        FileHandle.standardError.write(Data("ingest: forging the receipt (test CA: two RSA keys)…\n".utf8))
        let authority = try TestCertificateAuthority.generate()
        let trustDirectory = directory.appendingPathComponent("trust")
        try FileManager.default.createDirectory(at: trustDirectory, withIntermediateDirectories: true)
        try authority.root.pem.write(to: trustDirectory.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
        let verifier = ReceiptSignatureVerifier(trustStore: try TrustStore.load(directory: trustDirectory))
        // Distinct receipts (each with its own random opaque value, so its own bytes and signature):
        // the API keeps one job per receipt and app, and answers a repeat from that job.
        FileHandle.standardError.write(Data("ingest: forging and signing \(settings.receipts) receipts…\n".utf8))
        var bodies: [String] = []
        var forged: (receipt: AppReceipt, der: [UInt8])?
        for _ in 0..<settings.receipts {
            var receipt: (receipt: AppReceipt, der: [UInt8])
            if var next = forged?.receipt {
                // Same size as the first, own bytes: a new opaque value and hash, signed again.
                next.opaqueValue = (0..<16).map { _ in UInt8.random(in: 0...255) }
                next.sha1Hash = (0..<20).map { _ in UInt8.random(in: 0...255) }
                receipt = (next, try ReceiptForger.unified(next, authority: authority, digest: .sha256))
            } else {
                receipt = try ForgedReceipt.fourKilobytes(bundleID: bundleID, authority: authority)
            }
            let signature = verifier.verify(bytes: receipt.der, receipt: try ReceiptDecoder.decode(bytes: receipt.der))
            guard signature.valid else {
                throw BenchFailure(description: "a forged receipt does not verify against \(trustDirectory.path): \(signature.reason ?? "?")")
            }
            let body = try JSONSerialization.data(
                withJSONObject: [
                    "receipt": Data(receipt.der).base64EncodedString(), "user_identifier": "bench-user", "country_code": "US",
                ], options: [.sortedKeys, .withoutEscapingSlashes])
            bodies.append(String(decoding: body, as: UTF8.self))
            forged = forged ?? receipt
        }
        guard let forged, let body = bodies.first else { throw BenchFailure(description: "no receipt forged") }

        // Apps of the same bundle id, one token each: receipt r of app a is new to the API until
        // every (receipt, app) pair has been sent, --receipts × --apps requests per run.
        var tokens: [String] = []
        var appIDs: [UUID] = []
        defer { if !options.has("--keep-data") { BenchApps.delete(appIDs, on: postgres, row: "ingest") } }
        let admin = AppAdmin(connection: postgres)
        let label = UUID().uuidString.prefix(8).lowercased()
        for index in 0..<settings.apps {
            let (app, token) = try admin.addApp(
                name: "bench-ingest-\(label)-\(index)", bundleID: bundleID, sharedSecret: "receiptq-bench-shared-secret")
            appIDs.append(app.id)
            tokens.append(token)
        }
        let token = tokens[0]
        let prefix = "{rqi-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis) }

        let port = try Network.freePort()
        var environment = ProcessInfo.processInfo.environment
        environment.merge([
            "REDIS_KEY_PREFIX": prefix, "HTTP_HOST": "127.0.0.1", "HTTP_PORT": String(port),
            "API_SYNC_WAIT_MS": String(settings.syncWaitMs), "RECEIPTQ_TRUST_ROOTS_DIR": trustDirectory.path,
            "LOG_LEVEL": "warning", "RECEIPTQ_ENV": "development",
        ]) { _, new in new }
        let server = try ChildProcess(
            executable: receiptq, arguments: ["serve"], environment: environment, label: "serve", logDirectory: directory)
        var keepLogs = true
        defer {
            server.stop(grace: 10)
            if keepLogs {
                FileHandle.standardError.write(Data("ingest: the server's log and the wrk script: \(directory.path)\n".utf8))
            } else {
                try? FileManager.default.removeItem(at: directory)
            }
        }
        guard Network.waitForListener(port: port, timeout: 30) else {
            throw BenchFailure(description: "receiptq serve did not listen on \(port):\n\(server.logTail())")
        }
        let url = "http://127.0.0.1:\(port)\(path)"

        // One request first: what the server answers this receipt, in full, before thousands of them.
        let probe = try CurlEasy(options: CurlOptions()).perform(
            HTTPRequest(
                method: "POST", url: url,
                headers: [(name: "Content-Type", value: "application/json"), (name: "Authorization", value: "Bearer \(token)")],
                body: Array(body.utf8)))
        let probeBody = String(decoding: probe.body.prefix(300), as: UTF8.self)
        if !(200..<300).contains(probe.status) {
            FileHandle.standardError.write(Data("ingest: warning: the first POST answered \(probe.status): \(probeBody)\n".utf8))
        }
        _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis)

        let script = directory.appendingPathComponent("ingest.lua")
        let bodiesFile = directory.appendingPathComponent("bodies.txt")
        let tokensFile = directory.appendingPathComponent("tokens.txt")
        try (bodies.joined(separator: "\n") + "\n").write(to: bodiesFile, atomically: true, encoding: .utf8)
        try (tokens.joined(separator: "\n") + "\n").write(to: tokensFile, atomically: true, encoding: .utf8)
        try luaScript(bodies: bodiesFile.path, tokens: tokensFile.path, threads: settings.threads).write(
            to: script, atomically: true, encoding: .utf8)
        let wrkCommand = WrkCommand(wrk: wrk, script: script.path, url: url, settings: settings)
        let context = RunContext(server: server, redis: redis, postgres: postgres, postmaster: postmaster, keys: keys, prefix: prefix)

        if settings.warmup > 0 {
            FileHandle.standardError.write(Data("ingest: warm-up (\(Format.json(settings.warmup)) s)…\n".utf8))
            _ = try wrkCommand.run(seconds: settings.warmup)
            _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis)
        }
        var runs: [[String: Any]] = []
        for index in 1...settings.runs {
            FileHandle.standardError.write(Data("ingest: run \(index)/\(settings.runs) (\(Format.json(settings.seconds)) s)…\n".utf8))
            runs.append(try measure(wrkCommand, seconds: settings.seconds, context: context))
            guard server.isRunning else { throw BenchFailure(description: "receiptq serve exited:\n\(server.logTail())") }
        }
        var profile: [String: Any]?
        if settings.profileSeconds > 0 {
            FileHandle.standardError.write(Data("ingest: perf record of the server and Redis during one more run…\n".utf8))
            profile = try profileRun(wrkCommand, seconds: settings.profileSeconds, context: context, directory: directory)
        }

        let result = summarize(
            runs: runs, settings: settings, probe: (probe.status, probeBody),
            receipt: (der: forged.der.count, body: body.utf8.count, purchases: forged.receipt.inApp.count), redisHz: redisHz, receiptq: receiptq.path,
            wrk: wrk, profile: profile)
        keepLogs = !server.isRunning
        return result
    }

    // MARK: - One run

    struct RunContext {
        let server: ChildProcess
        let redis: RedisConnection
        let postgres: PostgresConnection
        let postmaster: Int32?
        let keys: RedisKeys
        let prefix: String
        /// The queue whose jobs a run's 2xx answers must all be in.
        var queueKind: JobKind = .validate
    }

    struct Snapshot {
        var wall = BenchClock.wall()
        var server: Double?
        var serverSwitches: (voluntary: Int, involuntary: Int)?
        var redis: RedisStats
        var postgres: [Int32: Double]
        var children = IngestRow.childrenCPUMicros()
        var machine = MachineCPU.sample()

        init(_ context: RunContext) throws {
            server = ProcessStats.cpuMicros(pid: context.server.pid)
            serverSwitches = ProcessStats.contextSwitches(pid: context.server.pid)
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
        let queue = context.keys.queue(context.queueKind.rawValue)
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
        let redisCPU = (after.redis.cpuSeconds - before.redis.cpuSeconds) * 1_000_000
        let postgresCPU = context.postmaster == nil ? Double.nan : ProcessStats.familyDelta(before.postgres, after.postgres)
        let wrkCPU = after.children - before.children
        let machine = MachineCPU.shares(before.machine, after.machine)
        let memory = ProcessStats.memory(pid: context.server.pid)
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
            "all_2xx_queued": queued >= report.ok,
            "server_cpu_pct": pct(serverCPU),
            "server_cpu_us_per_req": Format.json(serverCPU / requests),
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
            "machine_busy_pct": Format.json(machine.busy),
            "load_average_after": Machine.loadAverage(),
        ]
    }

    /// One more run with `perf record` of the server and Redis in its middle (not in the medians).
    static func profileRun(_ wrk: WrkCommand, seconds: Int, context: RunContext, directory: URL) throws -> [String: Any] {
        let load = try wrk.start(seconds: Double(seconds) + 2, logDirectory: directory)
        usleep(1_000_000)
        var pids = [context.server.pid]
        if let redis = try RedisStats.sample(context.redis).processID,
            ((try? String(contentsOfFile: "/proc/\(redis)/comm", encoding: .utf8)) ?? "").hasPrefix("redis")
        {
            pids.append(redis)
        }
        let perf = PerfProfile.record(pids: pids, seconds: seconds, directory: directory)
        load.process.waitUntilExit()
        _ = try? RedisCleanup.deleteKeys(prefix: context.prefix, context.redis)
        return perf
    }

    // MARK: - wrk

    struct WrkCommand {
        var wrk: String
        var script: String
        var url: String
        var settings: Settings

        func arguments(seconds: Double) -> [String] {
            [
                "-t", String(settings.threads), "-c", String(settings.connections), "-d", "\(Int(seconds.rounded(.up)))s",
                "--timeout", "5s", "--latency", "-s", script, url,
            ]
        }

        /// Runs wrk to completion and parses the Lua script's report.
        func run(seconds: Double) throws -> WrkReport {
            let output = ChildProcess.run(wrk, arguments(seconds: seconds), timeout: seconds + 60)
            guard output.status == 0 else { throw BenchFailure(description: "wrk exited \(output.status):\n\(output.output.suffix(1_000))") }
            return try WrkReport(output: output.output)
        }

        /// Starts wrk and returns at once (for the profiled run).
        func start(seconds: Double, logDirectory: URL) throws -> ChildProcess {
            try ChildProcess(
                executable: URL(fileURLWithPath: wrk), arguments: arguments(seconds: seconds), environment: ProcessInfo.processInfo.environment,
                label: "wrk-profile", logDirectory: logDirectory)
        }
    }

    /// What the Lua `done()` prints: one line `RECEIPTQ_WRK {json}`.
    struct WrkReport {
        var requests: Int
        var durationSeconds: Double
        /// µs: min, mean, p50, p90, p99, p999, max.
        var latency: [String: Double]
        var statuses: [String: Int]
        var socketErrors: [String: Int]

        var rps: Double { durationSeconds > 0 ? Double(requests) / durationSeconds : .nan }
        var ok: Int { statuses.filter { (Int($0.key) ?? 0) / 100 == 2 }.values.reduce(0, +) }
        var non2xx: Int { statuses.values.reduce(0, +) - ok }

        init(output: String) throws {
            guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("RECEIPTQ_WRK ") }),
                let object = try? JSONSerialization.jsonObject(with: Data(line.dropFirst("RECEIPTQ_WRK ".count).utf8)) as? [String: Any]
            else { throw BenchFailure(description: "no report from the wrk script in:\n\(output.suffix(1_000))") }
            func double(_ value: Any?) -> Double { (value as? NSNumber)?.doubleValue ?? .nan }
            requests = (object["requests"] as? NSNumber)?.intValue ?? 0
            durationSeconds = double(object["duration_us"]) / 1_000_000
            latency = (object["latency_us"] as? [String: Any] ?? [:]).mapValues(double)
            statuses = (object["statuses"] as? [String: Any] ?? [:]).mapValues { ($0 as? NSNumber)?.intValue ?? 0 }
            // wrk's own "status" error counts responses ≥ 400, which the statuses already hold.
            socketErrors = (object["errors"] as? [String: Any] ?? [:]).filter { $0.key != "status" }.mapValues {
                ($0 as? NSNumber)?.intValue ?? 0
            }
        }
    }

    /// The wrk script: POSTs of every (receipt, app) pair in turn (receipt first, then app, threads
    /// interleaved, so no pair repeats before all have been sent), every response counted by
    /// status (per thread, summed in `done`), and exact percentiles from wrk's histogram printed as
    /// one JSON line. Bodies and tokens are read from files, one per line.
    static func luaScript(bodies: String, tokens: String, threads: Int, path: String = IngestRow.path) -> String {
        """
        -- Written by receiptq-bench ingest.
        local bodies = {}
        for line in io.lines("\(bodies)") do table.insert(bodies, line) end
        local headers = {}
        for token in io.lines("\(tokens)") do
           table.insert(headers, {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token})
        end
        local path = "\(path)"

        local threads = {}

        function setup(thread)
           thread:set("id", #threads)
           table.insert(threads, thread)
        end

        function init(args)
           statuses = {}
           serial = id
        end

        function request()
           local n = serial
           serial = serial + \(threads)
           local body = bodies[n % #bodies + 1]
           local app = headers[math.floor(n / #bodies) % #headers + 1]
           return wrk.format("POST", path, app, body)
        end

        function response(status, headers, body)
           statuses[status] = (statuses[status] or 0) + 1
        end

        function done(summary, latency, requests)
           local counts = {}
           for _, thread in ipairs(threads) do
              for status, n in pairs(thread:get("statuses") or {}) do
                 counts[status] = (counts[status] or 0) + n
              end
           end
           local parts = {}
           for status, n in pairs(counts) do
              table.insert(parts, string.format('"%d":%d', status, n))
           end
           local e = summary.errors
           io.write(string.format(
              'RECEIPTQ_WRK {"duration_us":%.0f,"requests":%.0f,"bytes":%.0f,' ..
              '"errors":{"connect":%.0f,"read":%.0f,"write":%.0f,"status":%.0f,"timeout":%.0f},' ..
              '"latency_us":{"min":%.0f,"mean":%.1f,"p50":%.0f,"p90":%.0f,"p99":%.0f,"p999":%.0f,"max":%.0f},' ..
              '"statuses":{%s}}\\n',
              summary.duration, summary.requests, summary.bytes,
              e.connect, e.read, e.write, e.status, e.timeout,
              latency.min, latency.mean, latency:percentile(50), latency:percentile(90),
              latency:percentile(99), latency:percentile(99.9), latency.max,
              table.concat(parts, ",")))
        end

        """
    }

    // MARK: - Results

    static func summarize(
        runs: [[String: Any]], settings: Settings, probe: (status: Int, body: String), receipt: (der: Int, body: Int, purchases: Int),
        redisHz: Int, receiptq: String, wrk: String, profile: [String: Any]?
    ) -> [String: Any] {
        func values(_ key: String) -> [Double] { runs.map { ($0[key] as? Double) ?? ($0[key] as? Int).map(Double.init) ?? .nan } }
        func med(_ key: String, places: Double = 10) -> Double { Format.json(median(values(key)), places: places) }
        let errors = runs.reduce(0) { $0 + (($1["errors"] as? Int) ?? 0) }
        var statuses: [String: Int] = [:]
        for run in runs {
            for (status, count) in run["statuses"] as? [String: Int] ?? [:] { statuses[status, default: 0] += count }
        }
        let rps = med("rps")
        let p99 = med("p99_ms", places: 1_000)
        let probeOK = (200..<300).contains(probe.status)
        // Beyond receipts × apps requests, a run repeats pairs: the API answers those from the first job.
        let pairs = settings.receipts * settings.apps
        let repeated = runs.contains { (($0["requests"] as? Int) ?? 0) > pairs }

        var result: [String: Any] = [
            "rps": rps, "p50_ms": med("p50_ms", places: 1_000), "p99_ms": p99, "p999_ms": med("p999_ms", places: 1_000),
            "errors": errors, "statuses": statuses, "all_2xx_queued": runs.allSatisfy { $0["all_2xx_queued"] as? Bool == true },
            "server_cpu_pct": med("server_cpu_pct"), "server_cpu_us_per_req": med("server_cpu_us_per_req"),
            "server_peak_rss_mb": values("server_peak_rss_mb").max() ?? -1, "redis_cpu_pct": med("redis_cpu_pct"),
            "redis_cpu_us_per_req": med("redis_cpu_us_per_req"), "postgres_cpu_pct": med("postgres_cpu_pct"),
            "wrk_cpu_pct": med("wrk_cpu_pct"), "machine_busy_pct": med("machine_busy_pct"),
            "runs": runs, "connections": settings.connections, "wrk_threads": settings.threads, "window_s": settings.seconds,
            "warmup_s": settings.warmup, "api_sync_wait_ms": settings.syncWaitMs, "receipt_der_bytes": receipt.der,
            "receipt_purchases": receipt.purchases,
            "distinct_receipts": settings.receipts, "apps": settings.apps, "pairs_per_run": pairs, "pairs_repeated": repeated,
            "body_bytes": receipt.body, "redis_hz": redisHz,
            "probe": ["status": probe.status, "body": probe.body], "receiptq": receiptq, "wrk": wrk,
            "targets": [
                "rps_ge_10000": ["value": rps, "met": rps >= 10_000],
                "p99_le_20ms": ["value": p99, "met": p99 <= 20],
            ],
            "method": [
                "rps, p50_ms, p99_ms": "median over the runs of wrk's requests/duration and exact histogram percentiles (µs → ms)",
                "errors": "responses that are not 2xx + socket errors and timeouts, all runs",
                "*_cpu_pct": "utime+stime over the run ÷ wall time, % of one core (the machine has 2)",
                "server": "receiptq serve, API_SYNC_WAIT_MS=\(settings.syncWaitMs), no worker: 206 once the job is in Redis",
            ],
        ]
        if let profile { result["profile"] = profile }

        var table = TextTable(
            title:
                "ingest: POST \(path), \(settings.receipts) receipts × \(settings.apps) apps, \(receipt.der) B each (\(receipt.purchases) purchases, \(receipt.body) B body), wrk \(settings.threads) threads × "
                + "\(settings.connections) connections, \(Format.json(settings.seconds)) s runs, API_SYNC_WAIT_MS=\(settings.syncWaitMs)",
            headers: [
                "run", "req/s", "p50 ms", "p99 ms", "max ms", "non-2xx", "sock err", "server CPU %", "µs/req", "RSS MB", "redis CPU %",
                "pg CPU %", "wrk CPU %", "machine busy %", "",
            ])
        func row(_ label: String, _ run: [String: Any]) -> [String] {
            func cell(_ key: String) -> String { Format.micros((run[key] as? Double) ?? (run[key] as? Int).map(Double.init) ?? .nan) }
            let socket = (run["socket_errors"] as? [String: Int])?.values.reduce(0, +)
            let flagged =
                ((run["errors"] as? Int) ?? 0) > 0 || run["all_2xx_queued"] as? Bool == false || ((run["requests"] as? Int) ?? 0) > pairs
            return [
                label, Format.rate((run["rps"] as? Double) ?? .nan), cell("p50_ms"), cell("p99_ms"), cell("max_ms"),
                (run["non_2xx"] as? Int).map(String.init) ?? "-",
                socket.map(String.init) ?? "-", cell("server_cpu_pct"), cell("server_cpu_us_per_req"), cell("server_peak_rss_mb"),
                cell("redis_cpu_pct"), cell("postgres_cpu_pct"), cell("wrk_cpu_pct"), cell("machine_busy_pct"),
                flagged ? "ERRORS" : "",
            ]
        }
        for (index, run) in runs.enumerated() { table.add(row("run \(index + 1)", run)) }
        var medianRow = row("median", result)
        medianRow[5] = "\(runs.reduce(0) { $0 + (($1["non_2xx"] as? Int) ?? 0) })"
        medianRow[6] = "\(runs.reduce(0) { $0 + (($1["socket_errors"] as? [String: Int])?.values.reduce(0, +) ?? 0) })"
        medianRow[4] = "-"
        table.add(medianRow)
        table.notes.append("statuses (all runs): " + statuses.sorted { $0.key < $1.key }.map { "\($0.key) × \($0.value)" }.joined(separator: ", "))
        if let last = runs.last {
            let commands = (last["redis_commands_per_req"] as? [String: Any] ?? [:]).filter { $0.key != "info" }
                .sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            table.notes.append(
                "per request (last run): Redis \(commands), \(last["redis_net_in_bytes_per_req"] ?? "?") B in, "
                    + "\(last["redis_cpu_us_per_req"] ?? "?") µs Redis CPU; server \(last["server_context_switches_per_req"] ?? "?") "
                    + "context switches, \(last["server_threads"] ?? "?") threads")
        }
        // The API waits for a worker's result with BLPOP (≥ 10 ms) even at API_SYNC_WAIT_MS=0, and Redis
        // ends a short blocking timeout only after about one cron period (1000/hz ms): that bounds latency.
        let blpop = ((runs.last?["redis_commands_per_req"] as? [String: Any])?["blpop"] as? Double) ?? 0
        if blpop >= 0.5 {
            table.notes.append(
                "every POST waited in BLPOP for a worker's result (\(blpop) per request, API_SYNC_WAIT_MS=\(settings.syncWaitMs)); "
                    + "at Redis hz \(redisHz) such a short timeout fires only after ~\(redisHz > 0 ? 1_000 / redisHz : -1) ms")
        }
        table.notes.append(
            "first POST answered \(probe.status)" + (probeOK ? "" : ": \(probe.body)")
                + "; CPU % = utime+stime ÷ wall, of one core; non-2xx and sock err on the median line are totals")
        if runs.contains(where: { $0["all_2xx_queued"] as? Bool == false }) {
            table.notes.append("ERRORS: fewer jobs in the Redis queue than 2xx answers in a run")
        }
        if repeated {
            table.notes.append("ERRORS: a run sent more than \(pairs) requests, so some (receipt, app) pairs twice: raise --receipts or --apps")
        }
        table.notes.append(
            "targets: ≥ 10000 req/s \(rps >= 10_000 ? "met" : "not met") (\(Format.rate(rps))), "
                + "p99 ≤ 20 ms \(p99 <= 20 ? "met" : "not met") (\(Format.micros(p99)))"
                + (errors > 0 ? "; \(errors) errors: the run does not count" : ""))
        print(table.render())
        if let profile {
            for note in PerfProfile.notes(profile, title: "receiptq serve and Redis under load") { print(note) }
        }
        return result
    }
}
