import FacadeSupport
import Logging

/// A fixed-size pool of ``RedisConnection``s for async callers such as the HTTP API.
///
/// Each connection serves one caller at a time; when all are busy, callers wait (without
/// blocking a thread) until one is released. Connections are created on first demand and connect
/// on their own queue, so neither `init` nor a waiting caller ever blocks the cooperative pool.
///
/// ```swift
/// let pool = RedisConnectionPool(configuration: config, size: 4)
/// let depth = try await pool.command(["LLEN", "receipts:queue"]).int
/// try await pool.withConnection { redis in
///     _ = try redis.pipeline([["LPUSH", "q", a], ["LPUSH", "q", b]])
/// }
/// ```
public final class RedisConnectionPool: Sendable {
    private let leases: LeasePool<RedisConnection>

    /// Creates a pool; no connection is opened until a caller needs one.
    ///
    /// - Parameters:
    ///   - configuration: Used for every connection in the pool.
    ///   - size: The most connections open at once; at least 1.
    ///   - logger: Passed to each connection; defaults to the task-local `Logger.current`.
    public init(configuration: RedisConfiguration, size: Int, logger: Logger = Logger.current) {
        leases = LeasePool(
            size: size,
            make: { index in RedisConnection(unconnected: configuration, label: "pool-\(index)", logger: logger) },
            close: { $0.close() }, closedError: { RedisError.from(.closed) })
    }

    /// Lends a connection to `body`, waiting until one is free.
    ///
    /// `body` runs on the connection's own queue, so blocking calls such as
    /// ``RedisConnection/send(_:)`` and ``RedisConnection/pipeline(_:)`` are fine inside it.
    /// The connection goes back to the pool afterwards, even when `body` throws; a connection
    /// broken by an I/O error reconnects on its next use.
    ///
    /// - Parameter body: Work to do with the connection; do not keep the connection after it returns.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws, ``RedisError/Code/closed`` when the pool is closed, or
    ///   `CancellationError` when the task is cancelled while waiting.
    public func withConnection<T: Sendable>(_ body: @Sendable (RedisConnection) throws -> T) async throws -> T {
        let connection = try await leases.acquire()
        defer { leases.release(connection) }
        return try await connection.run(body)
    }

    /// Runs one command on a pooled connection.
    ///
    /// - Parameter arguments: The command name and its arguments.
    /// - Returns: The reply.
    /// - Throws: ``RedisError``, as for ``RedisConnection/send(_:)``.
    public func command(_ arguments: [String]) async throws -> RedisValue {
        try await withConnection { try $0.send(arguments) }
    }

    /// As ``withConnection(_:)``, for work that is safe to run twice: reads, and writes whose
    /// repeat changes nothing (a `SET` of the same value, a script keyed by an idempotency key).
    ///
    /// When `body` fails because the connection broke (``RedisError/isBrokenConnection``: the
    /// server closed it or a failover moved the primary), it runs once more on the same lease,
    /// which reconnects first. A timeout is not retried: a server that does not answer would cost
    /// the caller a second timeout. Nor is a failed connect: the reconnect already was the retry.
    ///
    /// - Parameter body: Work to do with the connection, safe to repeat.
    /// - Returns: What `body` returns.
    /// - Throws: What the second run throws, or what the first throws when it is not a broken
    ///   connection; ``RedisError/Code/closed`` and `CancellationError` as ``withConnection(_:)``.
    public func withConnectionRetryingOnce<T: Sendable>(_ body: @Sendable (RedisConnection) throws -> T) async throws -> T {
        try await withConnection { connection in
            do {
                return try body(connection)
            } catch let error as RedisError where error.isBrokenConnection {
                return try body(connection)
            }
        }
    }

    /// Runs one command that is safe to repeat (a read, an idempotent write) on a pooled
    /// connection, once more on a reconnected one when the first found it broken; see
    /// ``withConnectionRetryingOnce(_:)``.
    ///
    /// - Parameter arguments: The command name and its arguments.
    /// - Returns: The reply.
    /// - Throws: ``RedisError``, as for ``RedisConnection/send(_:)``.
    public func commandRetryingOnce(_ arguments: [String]) async throws -> RedisValue {
        try await withConnectionRetryingOnce { try $0.send(arguments) }
    }

    /// How many callers are waiting for a connection (every one busy); for tests and metrics.
    public var waiting: Int { leases.waiting }

    /// Closes idle connections now and busy ones when they are released; waiting and later
    /// callers get ``RedisError/Code/closed``. Idempotent.
    public func close() { leases.close() }
}
