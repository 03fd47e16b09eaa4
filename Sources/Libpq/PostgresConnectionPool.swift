import FacadeSupport
import Logging

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
    private let leases: LeasePool<PostgresConnection>

    /// Creates a pool; no connection is opened until a caller needs one.
    ///
    /// - Parameters:
    ///   - configuration: Used for every connection in the pool.
    ///   - size: The most connections open at once; at least 1.
    ///   - logger: Passed to each connection; defaults to the task-local `Logger.current`.
    public init(configuration: PostgresConfiguration, size: Int, logger: Logger = Logger.current) {
        leases = LeasePool(
            size: size,
            make: { index in PostgresConnection(unconnected: configuration, label: "pool-\(index)", logger: logger) },
            close: { $0.close() }, closedError: { PostgresError.from(.closed) })
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
        let connection = try await leases.acquire()
        defer { leases.release(connection) }
        return try await connection.runPooled(body)
    }

    /// Closes idle connections now and busy ones when they are released; waiting and later
    /// callers get ``PostgresError/Code/closed``. Idempotent.
    public func close() { leases.close() }
}
