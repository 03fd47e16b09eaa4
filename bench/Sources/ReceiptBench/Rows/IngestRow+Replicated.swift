import Foundation
import Hiredis
import Libpq
import ReceiptCore
import ReceiptTesting
import RedisJobQueue

extension IngestRow {
    /// `--replicas-ack N`: what acknowledged replication costs. N throwaway `redis-server` replicas
    /// of the services' Redis (on loopback, so the cost is Redis's and receiptq's, not a network's),
    /// and a second `receiptq serve` with `REDIS_MIN_REPLICAS_ACK=N` posting as apps of its own;
    /// its runs alternate with the single series', which runs with the same replicas attached
    /// (so the difference is the `WAIT`, not the replication stream both pay).
    ///
    /// `--baseline PATH` is the same series with no replica: another `receiptq` binary (an earlier
    /// commit's build) serving the same load, so what a change costs is measured side by side.
    final class ReplicatedSeries {
        let replicasAck: Int
        /// The other binary of a `--baseline` series (nil: the `WAIT` series).
        let baseline: URL?
        /// The table's row label.
        var label: String { baseline == nil ? "WAIT" : "BASE" }
        let wrk: WrkCommand
        let context: RunContext
        private let server: ChildProcess
        private let replicas: [ChildProcess]
        var isRunning: Bool { server.isRunning && replicas.allSatisfy(\.isRunning) }

        init(
            replicasAck: Int, redis: RedisConfiguration, receiptq: URL, environment: [String: String], tokens: [String],
            bodies: URL, settings: Settings, wrk wrkPath: String, bench: RedisConnection, postgres: PostgresConnection, postmaster: Int32?,
            directory: URL, baseline: URL? = nil
        ) throws {
            self.replicasAck = replicasAck
            self.baseline = baseline
            guard let redisServer = ChildProcess.which("redis-server") else { throw BenchFailure(description: "redis-server not on PATH") }
            var started: [ChildProcess] = []
            do {
                for index in 0..<replicasAck {
                    let port = try freeLoopbackPort()
                    let data = directory.appendingPathComponent("replica-\(index)")
                    try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
                    var arguments = [
                        "--port", String(port), "--bind", "127.0.0.1", "--dir", data.path, "--save", "", "--appendonly", "no",
                        "--replicaof", redis.host, String(redis.port),
                    ]
                    if let password = redis.password { arguments += ["--masterauth", password] }
                    started.append(
                        try ChildProcess(
                            executable: URL(fileURLWithPath: redisServer), arguments: arguments, environment: [:], label: "replica-\(index)",
                            logDirectory: directory))
                }
                // Following once the primary lists them online.
                let deadline = Date().addingTimeInterval(60)
                while ReplicationStatus.parse(info: (try? bench.send(["INFO", "replication"]).string) ?? "").replicas < replicasAck {
                    guard Date() < deadline, started.allSatisfy(\.isRunning) else {
                        throw BenchFailure(description: "the replicas did not come online:\n\(started.first?.logTail() ?? "")")
                    }
                    Thread.sleep(forTimeInterval: 0.1)
                }
            } catch {
                for replica in started { _ = replica.stop(grace: 5) }
                throw error
            }
            replicas = started

            let prefix = "{rqw-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
            let port = try freeLoopbackPort()
            var environment = environment
            environment.merge([
                "REDIS_KEY_PREFIX": prefix, "HTTP_PORT": String(port), "REDIS_MIN_REPLICAS_ACK": String(replicasAck),
            ]) { _, new in new }
            server = try ChildProcess(
                executable: baseline ?? receiptq, arguments: ["serve"], environment: environment,
                label: baseline == nil ? "serve-wait" : "serve-baseline", logDirectory: directory)
            guard Network.waitForListener(port: port, timeout: 30) else {
                throw BenchFailure(description: "receiptq serve (\(baseline == nil ? "WAIT" : "BASE")) did not listen:\n\(server.logTail())")
            }
            let tokensFile = directory.appendingPathComponent("wait-tokens.txt")
            try (tokens.joined(separator: "\n") + "\n").write(to: tokensFile, atomically: true, encoding: .utf8)
            let script = directory.appendingPathComponent("wait.lua")
            try IngestRow.luaScript(bodies: bodies.path, tokens: tokensFile.path, threads: settings.threads).write(
                to: script, atomically: true, encoding: .utf8)
            wrk = WrkCommand(wrk: wrkPath, script: script.path, url: "http://127.0.0.1:\(port)\(IngestRow.path)", settings: settings)
            context = RunContext(
                server: server, redis: bench, postgres: postgres, postmaster: postmaster, keys: RedisKeys(prefix: prefix), prefix: prefix)
        }

        func stop() {
            _ = server.stop(grace: 10)
            for replica in replicas { _ = replica.stop(grace: 5) }
        }

        /// The series next to the single POSTs' runs: medians and the ratios of the same run.
        func summary(single: [[String: Any]], runs: [[String: Any]]) -> (json: [String: Any], note: String) {
            let values = IngestRow.numbers
            let rps = (single: median(values(single, "rps")), wait: median(values(runs, "rps")))
            let p50 = (single: median(values(single, "p50_ms")), wait: median(values(runs, "p50_ms")))
            let p99 = (single: median(values(single, "p99_ms")), wait: median(values(runs, "p99_ms")))
            let paired = zip(values(runs, "rps"), values(single, "rps")).map { $0 / $1 }
            let json: [String: Any] = [
                "replicas_ack": replicasAck, "runs": runs, "rps": Format.json(rps.wait), "p50_ms": Format.json(p50.wait, places: 1_000),
                "p99_ms": Format.json(p99.wait, places: 1_000), "ratio_rps": Format.json(rps.wait / rps.single, places: 100),
                "ratio_rps_per_run": paired.map { Format.json($0, places: 100) },
                "p50_added_ms": Format.json(p50.wait - p50.single, places: 1_000), "p99_added_ms": Format.json(p99.wait - p99.single, places: 1_000),
                "all_2xx_queued": runs.allSatisfy { $0["all_2xx_queued"] as? Bool == true },
                "errors": runs.reduce(0) { $0 + (($1["errors"] as? Int) ?? 0) },
            ]
            if let baseline {
                return (
                    json.merging(["baseline": baseline.path]) { $1 },
                    "BASE rows: the same load on \(baseline.path): this build's req/s \(Format.json(rps.single / rps.wait, places: 100))× the "
                        + "baseline's (run by run \(paired.map { "\(Format.json(1 / $0, places: 100))×" }.joined(separator: ", "))), p50 "
                        + "\(Format.json(p50.single - p50.wait, places: 100)) ms and p99 \(Format.json(p99.single - p99.wait, places: 100)) ms more"
                )
            }
            let note =
                "WAIT rows: a second serve with REDIS_MIN_REPLICAS_ACK=\(replicasAck) (\(replicasAck) replica(s) on loopback, attached "
                + "during every row): req/s \(Format.json(rps.wait / rps.single, places: 100))× the single POST's (run by run "
                + "\(paired.map { "\(Format.json($0, places: 100))×" }.joined(separator: ", "))), p50 "
                + "\(Format.json(p50.wait - p50.single, places: 100)) ms and p99 \(Format.json(p99.wait - p99.single, places: 100)) ms more"
            return (json, note)
        }
    }
}
