import BaseSupport
import Dispatch
import Foundation
import Hiredis
import Logging
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// The ingestion API's side of Redis: queue a job durably (idempotently), and hear the worker's
/// answer for a request that waits.
///
/// Enqueues from concurrent requests are group-committed: whatever arrives while one pipeline is
/// in flight goes out in the next, one round trip for many requests. Answers come over pub/sub on
/// this node's own channel (the job names it in `replyTo`), so a thousand waiting requests hold no
/// connection each, as a `BLPOP` per request would.
///
/// A `Service`: the result listener's thread starts in ``run()``, and its end closes the
/// connections. Without it (a one-off enqueue) nothing waits for answers.
public final class RedisIntake: ReceiptIntake, Service {
    /// This node's name on its result channel.
    public let node: String
    private let pool: RedisConnectionPool
    private let keys: RedisKeys
    private let pendingTTLSeconds: String
    private let idempotencyTTLSeconds: String
    private let writer: PipelineBatcher
    private let listener: ResultListener

    /// Creates the intake; its result listener starts with ``run()``, its connections on first use.
    /// - Parameters:
    ///   - configuration: how to reach Redis (the writer and the listener own a connection each).
    ///   - pool: connections for the API's other reads.
    ///   - keys: the key schema.
    ///   - pendingTTL: how long a pending resource is kept when no worker ever stores the receipt
    ///     (longer than the retry policy's maximum age).
    ///   - idempotencyWindow: how long the same receipt of the same app maps to the same id.
    ///   - replication: replicas that must have each pipeline's writes before its requests are
    ///     answered (`REDIS_MIN_REPLICAS_ACK`), and how long to wait for them; nil: none (a 2xx
    ///     then means the primary ran the script).
    ///   - logger: where the listener reports losing Redis.
    public init(
        configuration: RedisConfiguration, pool: RedisConnectionPool, keys: RedisKeys, pendingTTL: Duration = .seconds(8 * 86_400),
        idempotencyWindow: Duration = .seconds(86_400), replication: ReplicaAcknowledgement? = nil, logger: Logger
    ) {
        let host = ProcessInfo.processInfo.hostName
        self.node = "\(host)-\(ProcessInfo.processInfo.processIdentifier)-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        self.pool = pool
        self.keys = keys
        self.pendingTTLSeconds = String(max(1, Int(pendingTTL.seconds)))
        self.idempotencyTTLSeconds = String(max(1, Int(idempotencyWindow.seconds)))
        self.writer = PipelineBatcher(
            connection: RedisConnection(lazy: configuration, label: "intake-writer", logger: logger), replication: replication)
        self.listener = ResultListener(
            connection: RedisConnection(lazy: configuration, label: "intake-results", logger: logger), channel: keys.results(node),
            logger: logger)
    }

    /// Runs the result listener's thread until graceful shutdown or cancellation, then
    /// ``shutdown()``: waiting requests answer "queued", and the connections close.
    public func run() async throws {
        let listener = self.listener
        await withTaskCancellationOrGracefulShutdownHandler {
            await listener.run()
        } onCancelOrGracefulShutdown: {
            listener.requestStop()
        }
        shutdown()
    }

    /// Returns once the listener is subscribed (requests can wait for their answers), or after
    /// `limit`: the API calls it before it binds, so its first requests can wait too, and with
    /// Redis down it still starts.
    public func waitUntilListening(within limit: Duration) async {
        let deadline = ContinuousClock.now + limit
        // Polled: the subscription is one round trip to Redis, and a signal for it would be more
        // code than the few polls of a start.
        while !listener.isSubscribed, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Stops the listener (waiting requests answer "queued") and closes the connections; ``run()``
    /// calls it when it ends.
    public func shutdown() {
        listener.stop()
        writer.close()
    }

    public func enqueue(
        _ envelope: JobEnvelope, pending: ReceiptResource?, idempotencyKey: String, wait: Duration
    ) async throws
        -> IntakeResult
    {
        var envelope = envelope
        let id = envelope.id.canonical
        let waits = wait > .zero && listener.isSubscribed
        if waits {
            envelope.replyTo = node
            listener.expect(envelope.id)
        }
        // One script, so the idempotency check and the writes are atomic; by SHA, in the writer's
        // group-committed pipeline.
        let scriptKeys = [
            keys.idempotency(app: envelope.appID.canonical, receiptSHA256: idempotencyKey), keys.pending(id), keys.queue(envelope.queueName),
        ]
        // Who claims the bytes, as a hash (the user's id never sits in the key): a second app user
        // presenting the same proof is a claim of their own, not an echo of the first user's.
        let claimant = envelope.payload.userIdentifier.flatMap { $0.isEmpty ? nil : StableHash.hex($0.utf8) } ?? ""
        let arguments = [
            bytes(id), bytes(idempotencyTTLSeconds), pending?.encoded() ?? [], bytes(pendingTTLSeconds), envelope.encoded(), bytes(claimant),
        ]
        let reply: RedisValue
        do {
            // Repeatable: a second run finds the idempotency key the first set and names its job.
            reply = try await RedisScriptRunner.run(
                RedisScripts.intakeEnqueue, keys: scriptKeys, arguments: arguments, via: { try await self.writer.submit($0, repeatable: true) })
        } catch {
            if waits { listener.forget(envelope.id) }
            throw error
        }
        switch reply {
        // Our own id: the pipeline ran twice (see `PipelineBatcher`) and the first run queued it.
        case .bulk(let bytes) where !bytes.isEmpty && UUID(uuidString: String(decoding: bytes, as: UTF8.self)) != envelope.id:
            if waits { listener.forget(envelope.id) }
            guard let existing = UUID(uuidString: String(decoding: bytes, as: UTF8.self)) else {
                throw RedisQueueError.transactionFailed("idempotency key holds no id")
            }
            return .duplicate(existing)
        case .bulk, .status:
            guard waits else { return .queued }
            guard let answer = await listener.wait(for: envelope.id, timeout: wait), let resource = try? ReceiptResource.decode(answer)
            else { return .queued }
            return .answered(resource)
        case .error(let message):
            if waits { listener.forget(envelope.id) }
            throw RedisQueueError.transactionFailed("enqueue refused: \(message)")
        default:
            if waits { listener.forget(envelope.id) }
            throw RedisQueueError.transactionFailed("enqueue: unexpected reply")
        }
    }

    /// Adds a batch's counts to its import's progress hash and lists the import as active, in one
    /// script (`RedisScripts.importProgress`).
    public func recordImport(_ id: UUID, appID: UUID, tally: ImportBatchTally, at: Date) async {
        let arguments = [
            appID.canonical, String(milliseconds(at)), String(tally.queued), String(tally.duplicates), String(tally.invalid),
            String(keys.importRunRetention), id.canonical,
        ]
        // Best effort: the batch's jobs are already durable; progress is a view of them.
        _ = try? await RedisScriptRunner.run(
            RedisScripts.importProgress, keys: [keys.importRun(id.canonical), keys.importRuns], arguments: arguments.map(bytes),
            via: { try await self.writer.submit($0, repeatable: false) })
    }

    public func pendingResource(id: UUID) async throws -> ReceiptResource? {
        let reply = try await pool.commandRetryingOnce(["GET", keys.pending(id.canonical)])
        guard case .bulk(let bytes) = reply else { return nil }
        return try? ReceiptResource.decode(bytes)
    }

    public func ping() async -> Bool {
        (try? await pool.commandRetryingOnce(["PING"])) == .status("PONG")
    }
}

/// Group commit for one connection: commands submitted while a pipeline is in flight go out
/// together in the next one.
final class PipelineBatcher: Sendable {
    private struct Pending {
        var command: [[UInt8]]
        /// Safe to run twice (an enqueue keyed by its idempotency key), so a pipeline of only
        /// such commands is sent once more when it found its connection broken.
        var repeatable: Bool
        var continuation: CheckedContinuation<RedisValue, any Error>
    }

    private let connection: RedisConnection
    private let replication: ReplicaAcknowledgement?
    private let state = Mutex<(queued: [Pending], draining: Bool)>(([], false))
    private let drainQueue = DispatchQueue(label: "receiptq.intake.writer")
    /// Bounds one pipeline, so a burst cannot build a reply buffer without limit.
    private let maxBatch = 512

    init(connection: RedisConnection, replication: ReplicaAcknowledgement? = nil) {
        self.connection = connection
        self.replication = replication.flatMap { $0.replicas > 0 ? $0 : nil }
    }

    /// Sends `command` in the next pipeline and returns its reply.
    /// - Parameters:
    ///   - command: the command and its arguments.
    ///   - repeatable: whether running it twice is harmless (see ``Pending/repeatable``).
    func submit(_ command: [[UInt8]], repeatable: Bool) async throws -> RedisValue {
        try await withCheckedThrowingContinuation { continuation in
            let startDrain = state.withLock { state -> Bool in
                state.queued.append(Pending(command: command, repeatable: repeatable, continuation: continuation))
                guard !state.draining else { return false }
                state.draining = true
                return true
            }
            if startDrain { drainQueue.async { self.drain() } }
        }
    }

    func close() { connection.close() }

    private func drain() {
        while true {
            let batch = state.withLock { state -> [Pending] in
                let taken = Array(state.queued.prefix(maxBatch))
                state.queued.removeFirst(taken.count)
                if taken.isEmpty { state.draining = false }
                return taken
            }
            guard !batch.isEmpty else { return }
            do {
                var commands = batch.map(\.command)
                // One WAIT per pipeline, not per request: it covers every write this connection made.
                if let replication { commands.append(replication.command) }
                let replies: [RedisValue]
                do {
                    replies = try connection.pipeline(bytes: commands)
                } catch let error as RedisError where error.isBrokenConnection && batch.allSatisfy(\.repeatable) {
                    // A connection the server closed under it (the stale check missed it by a hair)
                    // or a failover: once more, reconnected, rather than a 503 for every request.
                    replies = try connection.pipeline(bytes: commands)
                }
                // The primary has the jobs, the replicas may not: a failover now could lose them, so
                // nothing is acknowledged. The clients' retries are idempotent.
                try replication?.check(replies.last)
                for (pending, reply) in zip(batch, replies) { pending.continuation.resume(returning: reply) }
            } catch {
                // The connection broke mid-pipeline: each command may or may not have run. The
                // callers answer 503 and the clients retry; the idempotency key makes that safe.
                for pending in batch { pending.continuation.resume(throwing: error) }
            }
        }
    }
}

/// This node's subscription to its result channel, and the requests waiting on it.
final class ResultListener: @unchecked Sendable {
    private enum Slot {
        case expecting
        case waiting(CheckedContinuation<[UInt8]?, Never>)
        case arrived([UInt8]?)
    }

    private let connection: RedisConnection
    private let channel: String
    private let logger: Logger
    private let slots = Mutex<[UUID: Slot]>([:])
    private let subscribed = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    private let closed = Atomic<Bool>(false)
    /// Entered while the listening thread runs; ``stop()`` waits on it.
    private let running = DispatchGroup()

    init(connection: RedisConnection, channel: String, logger: Logger) {
        self.connection = connection
        self.channel = channel
        self.logger = logger
    }

    /// Listens on a thread of its own (the connection blocks on its socket) until ``requestStop()``
    /// or ``stop()``; returns at once when it already ran.
    func run() async {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        running.enter()
        await NamedThread.run("receiptq.intake") { [self] in
            listen()
            running.leave()
        }
    }

    /// Asks the listening thread to end (within its 250 ms read timeout); does not wait.
    func requestStop() { stopping.store(true, ordering: .releasing) }

    /// Whether answers can arrive now (a request waits only then; otherwise it answers "queued").
    var isSubscribed: Bool { subscribed.load(ordering: .acquiring) }

    /// Registers interest before the job is queued, so an answer that comes before the request
    /// starts waiting is kept, not lost.
    func expect(_ id: UUID) { slots.withLock { $0[id] = .expecting } }

    /// Drops interest (the job was not queued).
    func forget(_ id: UUID) { _ = slots.withLock { $0.removeValue(forKey: id) } }

    /// The waits' timeouts: a queue of their own, so a global pool held by blocking work cannot
    /// keep a request waiting past its sync-wait budget.
    static let timeouts = DispatchQueue(label: "receiptq.intake.timeouts")

    /// Waits for the job's message: the resource bytes, or nil for "not validated yet" or a timeout.
    func wait(for id: UUID, timeout: Duration) async -> [UInt8]? {
        await withCheckedContinuation { continuation in
            let ready = slots.withLock { slots -> [UInt8]?? in
                switch slots[id] {
                case .arrived(let bytes)?:
                    slots[id] = nil
                    return .some(bytes)
                case .expecting?:
                    slots[id] = .waiting(continuation)
                    return nil
                default:
                    return .some(nil)
                }
            }
            if let ready { return continuation.resume(returning: ready) }
            Self.timeouts.asyncAfter(deadline: .now() + timeout.seconds) { [self] in resume(id, with: nil) }
        }
    }

    /// Ends the listening thread, waiting for it, then closes the connection and answers every
    /// waiting request with "not yet". Later calls do nothing.
    func stop() {
        requestStop()
        running.wait()
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        connection.close()
        let waiting = slots.withLock { slots in
            defer { slots.removeAll() }
            return slots.values
        }
        for case .waiting(let continuation) in waiting { continuation.resume(returning: nil) }
    }

    private func resume(_ id: UUID, with bytes: [UInt8]?) {
        let continuation = slots.withLock { slots -> CheckedContinuation<[UInt8]?, Never>? in
            switch slots[id] {
            case .waiting(let continuation)?:
                slots[id] = nil
                return continuation
            case .expecting?:
                slots[id] = .arrived(bytes)
                return nil
            default:
                return nil
            }
        }
        continuation?.resume(returning: bytes)
    }

    private func listen() {
        var failures = 0
        while !stopping.load(ordering: .relaxed) {
            do {
                if !isSubscribed {
                    try connection.subscribe(channel)
                    subscribed.store(true, ordering: .releasing)
                    if failures > 0 { logger.info("Result channel subscribed again") }
                    failures = 0
                }
                guard let message = try connection.nextMessage(timeout: .milliseconds(250)) else { continue }
                deliver(message)
            } catch {
                subscribed.store(false, ordering: .releasing)
                failures += 1
                // Requests stop waiting for now (they answer "queued"); say so once per outage.
                if failures == 1 { logger.warning("Result channel lost; requests answer without waiting", error: error) }
                Thread.sleep(forTimeInterval: min(1, 0.05 * Double(failures)))
            }
        }
        subscribed.store(false, ordering: .releasing)
    }

    /// `["message", channel, "<id>[ <resource JSON>]"]`
    private func deliver(_ message: RedisValue) {
        guard case .array(let parts) = message, parts.count == 3, case .bulk(let payload) = parts[2], payload.count >= 36,
            let id = UUID(uuidString: String(decoding: payload.prefix(36), as: UTF8.self))
        else { return }
        resume(id, with: payload.count > 37 ? Array(payload.dropFirst(37)) : nil)
    }
}
