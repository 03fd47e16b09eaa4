import Curl
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
/// Around each run: the CPU (utime+stime, and stime alone: the kernel's socket work) and peak RSS
/// of the server, Redis's CPU (`INFO cpu`) and commands, Postgres's CPU (its processes in `/proc`),
/// wrk's own CPU (it shares the 2 cores), the machine's busy share, and the jobs in the Redis
/// queue. The run's keys are deleted after each run (so pairs are new again), the apps at the end.
/// With perf installed, one more run is profiled (`perf record` of the server and Redis) unless
/// `--profile-seconds 0`. With the peer and the stage lines, the row also prints what 1.2× the
/// peer's rate would leave the server's HTTP path (`IngestRow.rateBound`).
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
        OptionSpec(name: "--no-peer", takesValue: false, help: "skip the Python peer (bench/peer/ingest_endpoint.py)"),
        OptionSpec(name: "--peer-processes", takesValue: true, help: "the Python peer's processes on one port (default: one per core)"),
        OptionSpec(name: "--stage-samples", takesValue: true, help: "requests whose server steps are timed one by one (default 2000; 0 = none)"),
        OptionSpec(
            name: "--batch-items", takesValue: true,
            help: "also POST the receipts in batches of this many to the batch endpoint, runs alternating (default 0 = none)"),
        OptionSpec(
            name: "--replicas-ack", takesValue: true,
            help: "also run a serve with REDIS_MIN_REPLICAS_ACK of this many loopback replicas, runs alternating (default 0 = none)"),
        OptionSpec(
            name: "--baseline", takesValue: true,
            help: "also run this other receiptq binary (an earlier commit's release build) under the same load, runs alternating"),
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
        /// Processes of the Python peer (0: none).
        var peerProcesses = 0
        /// Requests whose steps are timed one by one in the bench process (0: none).
        var stageSamples = 0
        /// Receipts per batch of the bulk-import series (0: none).
        var batchItems = 0
        /// Replicas the `WAIT` series requires (0: no such series).
        var replicasAck = 0
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        func number(_ name: String, _ fallback: Double) throws -> Double {
            guard let text = options.extra[name] else { return fallback }
            guard let value = Double(text), value >= 0 else { throw BenchFailure(description: "\(name) needs a number, not \(text)") }
            return value
        }
        var settings = Settings(
            seconds: max(1, try number("--seconds", 10)), warmup: try number("--warmup-seconds", 3),
            connections: max(1, Int(try number("--connections", 50))), threads: max(1, Int(try number("--threads", 2))),
            runs: options.iterations(default: defaultIterations), syncWaitMs: Int(try number("--sync-wait-ms", 0)),
            profileSeconds: Int(try number("--profile-seconds", 6)), receipts: max(1, Int(try number("--receipts", 500))),
            apps: max(1, Int(try number("--apps", 200))))
        settings.peerProcesses = options.has("--no-peer") ? 0 : try options.positive("--peer-processes", default: PeerSidekiqRow.defaultProcesses)
        settings.stageSamples = Int(try number("--stage-samples", 2_000))
        settings.batchItems = min(1_000, Int(try number("--batch-items", 0)))
        settings.replicasAck = min(4, Int(try number("--replicas-ack", 0)))
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
        var apps: [AppRecord] = []
        defer { if !options.has("--keep-data") { BenchApps.delete(apps.map(\.id), on: postgres, row: "ingest") } }
        let admin = AppAdmin(connection: postgres)
        let label = UUID().uuidString.prefix(8).lowercased()
        /// `settings.apps` more apps named `bench-<series>-…`; their tokens.
        func addApps(_ series: String) throws -> [String] {
            try (0..<settings.apps).map { index in
                let (app, token) = try admin.addApp(
                    name: "bench-\(series)-\(label)-\(index)", bundleID: bundleID, sharedSecret: "receiptq-bench-shared-secret")
                apps.append(app)
                return token
            }
        }
        let tokens = try addApps("ingest")
        let token = tokens[0]
        let prefix = "{rqi-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis) }

        let port = try freeLoopbackPort()
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

        // The peer next to the server, both idle but for the run at hand: their runs alternate, so
        // the machine's drift over the minutes falls on both alike.
        let peer =
            settings.peerProcesses > 0
            ? try PythonPeer(tokens: tokensFile, redis: configuration.redis, count: settings.peerProcesses, directory: directory) : nil
        defer { peer?.stop() }
        let peerWrk = peer.map { WrkCommand(wrk: wrk, script: script.path, url: $0.url, settings: settings) }
        let peerContext = peer.map {
            RunContext(servers: $0.pids, redis: redis, postgres: postgres, postmaster: postmaster, prefix: $0.prefix, queue: $0.queue)
        }
        // Bulk imports: the same receipts in JSON arrays of --batch-items to the batch endpoint (their
        // validations go to the import queue), runs alternating with the single POSTs.
        var batch: (wrk: WrkCommand, context: RunContext)?
        if settings.batchItems > 0 {
            // Apps of their own: a pair the single series sent (or a warm-up's late answer took) is
            // never a batch's, so neither series is answered duplicates of the other's.
            let batchTokens = try addApps("import")
            let batchTokensFile = directory.appendingPathComponent("batch-tokens.txt")
            try (batchTokens.joined(separator: "\n") + "\n").write(to: batchTokensFile, atomically: true, encoding: .utf8)
            let batches = stride(from: 0, to: bodies.count, by: settings.batchItems).map {
                "[" + bodies[$0..<min($0 + settings.batchItems, bodies.count)].joined(separator: ",") + "]"
            }
            let batchesFile = directory.appendingPathComponent("batches.txt")
            let batchScript = directory.appendingPathComponent("batch.lua")
            try (batches.joined(separator: "\n") + "\n").write(to: batchesFile, atomically: true, encoding: .utf8)
            try luaScript(bodies: batchesFile.path, tokens: batchTokensFile.path, threads: settings.threads, path: path + "/batch").write(
                to: batchScript, atomically: true, encoding: .utf8)
            var context = RunContext(
                servers: [server.pid], redis: redis, postgres: postgres, postmaster: postmaster, prefix: prefix,
                queue: keys.queue(JobEnvelope.importQueue))
            context.itemsPerRequest = settings.batchItems
            batch = (WrkCommand(wrk: wrk, script: batchScript.path, url: url + "/batch", settings: settings), context)
        }
        let baseline = options.extra["--baseline"].map { URL(fileURLWithPath: $0) }
        guard settings.replicasAck == 0 || baseline == nil else {
            throw BenchFailure(description: "--baseline and --replicas-ack exclude each other")
        }
        let replicated =
            settings.replicasAck > 0 || baseline != nil
            ? try ReplicatedSeries(
                replicasAck: settings.replicasAck, redis: configuration.redis, receiptq: receiptq, environment: environment,
                tokens: try addApps(baseline == nil ? "wait" : "base"), bodies: bodiesFile, settings: settings, wrk: wrk, bench: redis,
                postgres: postgres, postmaster: postmaster, directory: directory, baseline: baseline) : nil
        defer { replicated?.stop() }
        if settings.warmup > 0 {
            FileHandle.standardError.write(Data("ingest: warm-up (\(Format.json(settings.warmup)) s)…\n".utf8))
            _ = try wrkCommand.run(seconds: settings.warmup)
            _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis)
            if let peer, let peerWrk {
                _ = try peerWrk.run(seconds: settings.warmup)
                _ = try? RedisCleanup.deleteKeys(prefix: peer.prefix, redis)
            }
            if let batch {
                _ = try batch.wrk.run(seconds: settings.warmup)
                _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis)
            }
            if let replicated {
                _ = try replicated.wrk.run(seconds: settings.warmup)
                _ = try? RedisCleanup.deleteKeys(prefix: replicated.context.prefix, redis)
            }
        }
        var runs: [[String: Any]] = []
        var peerRuns: [[String: Any]] = []
        var batchRuns: [[String: Any]] = []
        var replicatedRuns: [[String: Any]] = []
        for index in 1...settings.runs {
            FileHandle.standardError.write(Data("ingest: run \(index)/\(settings.runs) (\(Format.json(settings.seconds)) s)…\n".utf8))
            runs.append(try measure(wrkCommand, seconds: settings.seconds, context: context))
            guard server.isRunning else { throw BenchFailure(description: "receiptq serve exited:\n\(server.logTail())") }
            if let peer, let peerWrk, let peerContext {
                FileHandle.standardError.write(Data("ingest: peer run \(index)/\(settings.runs)…\n".utf8))
                peerRuns.append(try measure(peerWrk, seconds: settings.seconds, context: peerContext))
                guard peer.isRunning else { throw BenchFailure(description: "the Python peer exited:\n\(peer.processes[0].logTail())") }
            }
            if let batch {
                FileHandle.standardError.write(Data("ingest: batch run \(index)/\(settings.runs)…\n".utf8))
                batchRuns.append(try measure(batch.wrk, seconds: settings.seconds, context: batch.context))
            }
            if let replicated {
                FileHandle.standardError.write(Data("ingest: \(replicated.label) run \(index)/\(settings.runs)…\n".utf8))
                replicatedRuns.append(try measure(replicated.wrk, seconds: settings.seconds, context: replicated.context))
                guard replicated.isRunning else { throw BenchFailure(description: "the \(replicated.label) series' serve or a replica exited") }
            }
        }
        var profile: [String: Any]?
        if settings.profileSeconds > 0 {
            FileHandle.standardError.write(Data("ingest: perf record of the server and Redis during one more run…\n".utf8))
            profile = try profileRun(wrkCommand, seconds: settings.profileSeconds, context: context, directory: directory)
        }
        var stages: [Stage] = []
        if settings.stageSamples > 0, let app = apps.first {
            FileHandle.standardError.write(Data("ingest: the server's steps, timed one by one (\(settings.stageSamples) requests)…\n".utf8))
            stages = try Self.stages(bodies: bodies, app: app, verifier: verifier, samples: settings.stageSamples)
        }

        let result = summarize(
            runs: runs, settings: settings, probe: (probe.status, probeBody),
            receipt: (der: forged.der.count, body: body.utf8.count, purchases: forged.receipt.inApp.count), redisHz: redisHz, receiptq: receiptq.path,
            wrk: wrk, profile: profile, peer: peer.map { (version: $0.version, processes: $0.processes.count, runs: peerRuns) }, stages: stages,
            batch: batch == nil ? nil : (items: settings.batchItems, runs: batchRuns),
            replicated: replicated.map { ($0, replicatedRuns) })
        keepLogs = !server.isRunning
        return result
    }
}
