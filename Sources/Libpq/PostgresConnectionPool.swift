import Logging
import Synchronization

/// A fixed-size pool of ``PostgresConnection``s for async callers.
///
/// Each connection serves one caller at a time; when all are busy, callers wait (without
/// blocking a thread) until one is released. Connections are created on first demand and connect
/// on their own queue, so neither `init` nor a waiting caller ever blocks the cooperative pool.
///
/// ```swift
/// let pool = PostgresConnectionPool(configuration: config, size: 4)
/// let count = try await pool.withConnection { db in
///     try db.query("SELECT count(*) AS n FROM receipts WHERE status = \(status)").rows.first?.int("n")
/// }
/// ```
public final class PostgresConnectionPool: Sendable {
    private struct Waiter {
        var id: UInt64
        var continuation: CheckedContinuation<PostgresConnection, any Error>
    }

    private struct State {
        var idle: [PostgresConnection] = []
        var created = 0
        var waiters: [Waiter] = []
        var nextWaiterID: UInt64 = 0
        var isClosed = false
    }

    private let configuration: PostgresConfiguration
    private let size: Int
    private let logger: Logger
    private let state = Mutex(State())

    /// Creates a pool; no connection is opened until a caller needs one.
    ///
    /// - Parameters:
    ///   - configuration: Used for every connection in the pool.
    ///   - size: The most connections open at once; at least 1.
    ///   - logger: Passed to each connection; defaults to the task-local `Logger.current`.
    public init(configuration: PostgresConfiguration, size: Int, logger: Logger = Logger.current) {
        self.configuration = configuration
        self.size = max(1, size)
        self.logger = logger
    }

    /// Lends a connection to `body`, waiting until one is free.
    ///
    /// `body` runs on the connection's own queue, so blocking calls such as
    /// `query(_:)` and ``PostgresConnection/transaction(_:)`` are fine inside it. The connection
    /// goes back to the pool afterwards, even when `body` throws; a transaction `body` left open
    /// is rolled back first, and a dropped connection reconnects on its next use.
    ///
    /// - Parameter body: Work to do with the connection; do not keep the connection after it returns.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws, ``PostgresError/Code/closed`` when the pool is closed, or
    ///   `CancellationError` when the task is cancelled while waiting.
    public func withConnection<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let connection = try await acquire()
        defer { release(connection) }
        return try await connection.runPooled(body)
    }

    /// Closes idle connections now and busy ones when they are released; waiting and later
    /// callers get ``PostgresError/Code/closed``. Idempotent.
    public func close() {
        let (idle, waiters) = state.withLock { state -> ([PostgresConnection], [Waiter]) in
            state.isClosed = true
            defer {
                state.idle = []
                state.waiters = []
            }
            return (state.idle, state.waiters)
        }
        for waiter in waiters { waiter.continuation.resume(throwing: PostgresError.from(.closed)) }
        for connection in idle { connection.close() }
    }

    private enum Acquired {
        case connection(PostgresConnection)
        case failure(any Error)
        case waiting
    }

    private func acquire() async throws -> PostgresConnection {
        let id = state.withLock { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<PostgresConnection, any Error>) in
                let acquired = state.withLock { state -> Acquired in
                    if state.isClosed { return .failure(PostgresError.from(.closed)) }
                    if let connection = state.idle.popLast() { return .connection(connection) }
                    if state.created < size {
                        state.created += 1
                        let connection = PostgresConnection(
                            unconnected: configuration,
                            label: "pool-\(state.created)",
                            logger: logger
                        )
                        return .connection(connection)
                    }
                    // Checked under the lock: the cancellation handler takes the same lock, so
                    // either it sees this waiter or this sees the cancellation.
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return .waiting
                }
                switch acquired {
                case .connection(let connection): continuation.resume(returning: connection)
                case .failure(let error): continuation.resume(throwing: error)
                case .waiting: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    private func release(_ connection: PostgresConnection) {
        let (waiter, closeIt) = state.withLock { state -> (Waiter?, Bool) in
            if state.isClosed { return (nil, true) }
            if !state.waiters.isEmpty { return (state.waiters.removeFirst(), false) }
            state.idle.append(connection)
            return (nil, false)
        }
        if closeIt { connection.close() }
        waiter?.continuation.resume(returning: connection)
    }
}
