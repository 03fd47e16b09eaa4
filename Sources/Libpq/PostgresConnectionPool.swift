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
    /// What a caller vouches for about its work, which decides whether the pool may run it a second
    /// time when the connection dropped under it (``withConnection(_:_:)``).
    public enum Repeatability: Sendable {
        /// The work only reads: running it again changes nothing.
        case readOnly
        /// The work writes, but a second run leaves what one run leaves (an upsert, an insert
        /// that skips a row already there, a delete by key), even after a first run that
        /// committed without its answer arriving.
        case idempotent
    }

    private let leases: LeasePool<PostgresConnection>
    /// The readiness probe's own connection, apart from the lenders: a busy pool is not a server down.
    private let probe: PostgresConnection

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
        probe = PostgresConnection(unconnected: configuration, label: "pool-probe", logger: logger)
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

    /// Like ``withConnection(_:)``, and runs `body` once more, on the same connection reconnected,
    /// when the connection dropped under the first run (``PostgresError/Code/connectionLost``: the
    /// server restarted or ended the session between the connection's check and the statement).
    ///
    /// Only the caller knows whether a second run is harmless, so it says what `body` is; work
    /// that is neither read-only nor idempotent takes ``withConnection(_:)``, where a dropped
    /// connection's error reaches the caller (the statement may or may not have run). Nothing is
    /// retried when the server cannot be reached at all (``PostgresError/Code/connectionFailed``):
    /// a second try a moment later would fail the same way.
    ///
    /// - Parameters:
    ///   - repeatability: What `body` is: ``Repeatability/readOnly`` or ``Repeatability/idempotent``.
    ///   - body: Work to do with the connection; do not keep the connection after it returns.
    /// - Returns: What `body` returns.
    /// - Throws: What the last run of `body` throws, ``PostgresError/Code/closed`` when the pool is
    ///   closed, or `CancellationError` when the task is cancelled while waiting.
    public func withConnection<T: Sendable>(
        _ repeatability: Repeatability, _ body: @Sendable (PostgresConnection) throws -> T
    ) async throws -> T {
        let connection = try await leases.acquire()
        defer { leases.release(connection) }
        do {
            return try await connection.runPooled(body)
        } catch let error as PostgresError where error.code == .connectionLost {
            connection.logger.info(
                "Postgres connection lost during a repeatable call; running it again", metadata: ["postgres.repeatability": "\(repeatability)"])
            return try await connection.runPooled(body)
        }
    }

    /// Whether the server answers `SELECT 1` now, on a connection kept for this alone: a pool whose
    /// connections are all lent still answers at once. For readiness probes; never throws.
    public func ping() async -> Bool {
        (try? await probe.withConnection { try $0.query("SELECT 1").rows.count }) == 1
    }

    /// Closes idle connections now and busy ones when they are released; waiting and later
    /// callers get ``PostgresError/Code/closed``. Idempotent.
    public func close() {
        leases.close()
        probe.close()
    }
}
