import Foundation
import Hiredis
import ReceiptTesting

extension IngestRow {
    /// The peer of the row: `bench/peer/ingest_endpoint.py` (aiohttp on uvloop, redis-py with
    /// hiredis, from `bench/peer/requirements.txt` in `.local/bench-venv`), one process per core on
    /// one port (`SO_REUSEPORT`), fed by the same wrk script with the same bodies and tokens. It
    /// checks the token, the JSON fields and that the receipt is base64, and LPUSHes a job to its
    /// own list: less work than receiptq does (no receipt decode, no signature check, no
    /// idempotency, no pending resource), as issue 20 describes it.
    final class PythonPeer {
        let processes: [ChildProcess]
        let url: String
        let prefix: String
        let queue: String
        let version: String

        var pids: [Int32] { processes.map(\.pid) }
        var isRunning: Bool { processes.allSatisfy(\.isRunning) }

        init(tokens: URL, redis: RedisConfiguration, count: Int, directory: URL) throws {
            let root = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
            let script = root.appendingPathComponent("bench/peer/ingest_endpoint.py")
            guard FileManager.default.fileExists(atPath: script.path) else {
                throw BenchFailure(description: "no \(script.path): run from the repository")
            }
            FileHandle.standardError.write(Data("ingest: the Python peer's venv (scripts/setup-python .local/bench-venv …)…\n".utf8))
            let setup = ChildProcess.run(
                root.appendingPathComponent("scripts/setup-python").path, [".local/bench-venv", "bench/peer/requirements.txt"], timeout: 900)
            guard setup.status == 0 else { throw BenchFailure(description: "scripts/setup-python failed:\n\(setup.output.suffix(1_000))") }
            let python = root.appendingPathComponent(".local/bench-venv/bin/python")
            let versions = ChildProcess.run(
                python.path,
                [
                    "-c",
                    "import sys, aiohttp, uvloop, redis; print(f'aiohttp {aiohttp.__version__}, uvloop {uvloop.__version__}, "
                        + "redis-py {redis.__version__}, Python {sys.version.split()[0]}')",
                ])
            version = versions.output.trimmingCharacters(in: .whitespacesAndNewlines)
            prefix = "{rqpeer-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
            queue = "\(prefix):queue"
            let port = try freeLoopbackPort()
            url = "http://127.0.0.1:\(port)\(IngestRow.path)"
            var environment = ProcessInfo.processInfo.environment
            environment.merge([
                "PEER_PORT": String(port), "PEER_TOKENS": tokens.path, "PEER_QUEUE": queue,
                "PEER_REDIS_URL": PeerSidekiqRow.redisURL(redis, database: 0),
            ]) { _, new in new }
            var started: [ChildProcess] = []
            do {
                for index in 0..<max(1, count) {
                    started.append(
                        try ChildProcess(
                            executable: python, arguments: [script.path], environment: environment, label: "peer-\(index)", logDirectory: directory))
                }
                guard Network.waitForListener(port: port, timeout: 30) else {
                    throw BenchFailure(description: "the Python peer did not listen on \(port):\n\(started.first?.logTail() ?? "")")
                }
                // The others bind the same port a moment later; the warm-up covers the rest.
                usleep(500_000)
                guard started.allSatisfy(\.isRunning) else {
                    throw BenchFailure(description: "a Python peer process exited:\n\(started.first { !$0.isRunning }?.logTail() ?? "")")
                }
            } catch {
                for process in started { process.stop(grace: 2) }
                throw error
            }
            processes = started
        }

        func stop() {
            for process in processes { process.stop(grace: 5) }
        }
    }
}
