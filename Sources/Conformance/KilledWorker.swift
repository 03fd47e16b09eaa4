import Foundation
import Hiredis
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import Synchronization

/// The parent's side of ``Faults/workerKilled``: one of the deployment's workers as a process of
/// its own (`receiptq conformance-worker`, see ``ConformanceWorker``), which ``kill(within:)``
/// SIGKILLs while it holds jobs, and starts again. The deployment's in-process scheduler is the janitor that gives the
/// dead worker's jobs back, once its heartbeat lapses (``heartbeatTTLSeconds``).
final class KilledWorker: Sendable {
    /// `WORKER_HEARTBEAT_TTL_SECONDS` of the whole deployment under this fault: the janitor looks
    /// every second (half of it, at least 1 s) and takes a dead worker's jobs back within 3 s. Not
    /// the minimum, 2: the in-process worker beats every second either way, and 3 s lets a beat
    /// come a second late on a loaded machine without its live jobs being taken back.
    static let heartbeatTTLSeconds = 3

    private let arguments: [String]
    private let environment: [String: String]
    private let log: URL
    private let configuration: AppConfiguration
    private let child: Mutex<ChildProcess>

    /// Starts the worker.
    /// - Parameters:
    ///   - executable: `receiptq` (the command's own executable, the tests' build).
    ///   - environment: the deployment's whole environment (its database, key prefix, mock, secrets).
    ///   - clockFile: where the run's simulated clock is published.
    ///   - log: the child's stderr (appended to).
    init(executable: URL, environment: [String: String], clockFile: URL, log: URL) throws {
        arguments = [executable.path, "conformance-worker", "--clock-file", clockFile.path]
        self.environment = environment
        self.log = log
        configuration = try AppConfiguration(environment: environment)
        child = Mutex(try Self.spawn(arguments, environment: environment, log: log))
    }

    private static func spawn(_ arguments: [String], environment: [String: String], log: URL) throws -> ChildProcess {
        try ChildProcess(arguments, environment: environment, stderr: .file(log.path))
    }

    /// Waits up to `within` for the worker to hold a job; then SIGKILLs it, waits for it to die,
    /// starts another, and returns the jobs the dead one left in hand (the janitor's to give
    /// back). Nil when it held none by then: not killed.
    func kill(within: Duration) async throws -> Int? {
        let process = child.withLock { $0 }
        try ensureRunning(process)
        let redis = try RedisConnection(configuration: configuration.redis, label: "conformance-kill")
        defer { redis.close() }
        let deadline = ContinuousClock.now + within
        var lane: String?
        func holds() throws -> Bool {
            lane = try lane ?? self.lane(of: process.processIdentifier, redis)
            return try lane.map { try redis.send(["LLEN", configuration.keys.processing($0)]).int ?? 0 > 0 } ?? false
        }
        while try !holds() {
            guard ContinuousClock.now < deadline else { return nil }
            try await Task.sleep(for: .milliseconds(2))
        }
        Glibc.kill(process.processIdentifier, SIGKILL)
        while process.isRunning { try await Task.sleep(for: .milliseconds(5)) }
        // Dead, it changes nothing more: what its list holds now is what the janitor gives back.
        let held = try lane.map { try redis.send(["LLEN", configuration.keys.processing($0)]).int ?? 0 } ?? 0
        let next = try Self.spawn(arguments, environment: environment, log: log)
        child.withLock { $0 = next }
        return held
    }

    /// Returns once the worker has beaten its first heartbeat (it runs, on the deployment's Redis);
    /// throws, with what it said, if it exited or had not beaten within `timeout`.
    func awaitStarted(timeout: Duration) async throws {
        let process = child.withLock { $0 }
        let redis = try RedisConnection(configuration: configuration.redis, label: "conformance-kill")
        defer { redis.close() }
        let deadline = ContinuousClock.now + timeout
        while try lane(of: process.processIdentifier, redis) == nil {
            try ensureRunning(process)
            guard ContinuousClock.now < deadline else { throw WorkerProcessError.didNotStart(log: logTail()) }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Throws if `process` exited by itself (a kill the driver cannot make is a run that tests nothing).
    private func ensureRunning(_ process: ChildProcess) throws {
        guard process.isRunning else { throw WorkerProcessError.exited(status: process.terminationStatus, log: logTail()) }
    }

    private func logTail() -> String { String(((try? String(contentsOf: log, encoding: .utf8)) ?? "").suffix(2_000)) }

    /// The worker lane of process `pid`: the one whose heartbeat names it (nil before its first beat).
    private func lane(of pid: pid_t, _ redis: RedisConnection) throws -> String? {
        let lanes = try redis.send(["SMEMBERS", configuration.keys.workers]).array?.compactMap(\.string) ?? []
        return try lanes.first { try redis.send(["HGET", configuration.keys.worker($0), "pid"]).string == String(pid) }
    }

    /// Stops the worker gracefully (SIGTERM: it gives back what it holds), or SIGKILLs it after 20 s.
    func stop() async {
        let process = child.withLock { $0 }
        process.terminate()
        let deadline = ContinuousClock.now + .seconds(20)
        while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// The worker process a run kills did not run.
enum WorkerProcessError: Error, CustomStringConvertible {
    /// It exited by itself: its status, and the end of what it wrote to stderr.
    case exited(status: Int32, log: String)
    /// It never beat a heartbeat on the deployment's Redis.
    case didNotStart(log: String)

    var description: String {
        switch self {
        case .exited(let status, let log): "the conformance worker process exited (status \(status)): \(log)"
        case .didNotStart(let log): "the conformance worker process did not start: \(log)"
        }
    }
}
