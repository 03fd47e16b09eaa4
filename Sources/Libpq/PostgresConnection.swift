internal import CLibpq
import Dispatch
import FacadeSupport
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One connection to PostgreSQL, built on libpq.
///
/// The blocking methods (`query(_:)`, ``execute(_:)``, ``transaction(_:)``) are
/// for Dispatch worker threads; `query(_:)` in async code and
/// ``withConnection(_:)`` hop to the connection's own serial queue, so the cooperative thread
/// pool never blocks on the socket.
///
/// ```swift
/// let db = try PostgresConnection(configuration: config)
/// try db.transaction { db in
///     try db.query("UPDATE receipts SET status = \(status) WHERE id = \(id)")
///     try db.query("INSERT INTO events (receipt_id, kind) VALUES (\(id), \("verified"))")
/// }
/// let rows = try await db.query("SELECT id FROM receipts WHERE status = \(status)").rows
/// ```
///
/// Calls made from inside a closure that already runs on the connection's queue (a
/// ``transaction(_:)`` or ``withConnection(_:)`` body) run inline. Before each statement outside a
/// transaction the connection reads what the server sent it meanwhile: a session the server closed
/// (a restart, `pg_terminate_backend`) is reconnected (`PQreset`) before the statement is sent, so
/// a Postgres restart costs no failed call. A connection that drops during a call throws
/// ``PostgresError/Code/connectionLost`` and the next call reconnects. Inside a transaction there
/// is no reconnect, since the statements after it would silently run outside the transaction.
///
/// `@unchecked Sendable` is sound because every access to the `PGconn` and the mutable state
/// below happens on `queue`, a private serial queue; a `PGconn` must not be used from two
/// threads at once.
public final class PostgresConnection: @unchecked Sendable {
    private let configuration: PostgresConfiguration
    /// Tagged with the connection's label; the pool logs its retries with it.
    let logger: Logger
    private let queue: ConfinedQueue
    /// Target of libpq's notice processor; lives as long as the connection, which frees the
    /// `PGconn` (and with it the only pointer to this) first.
    private let notices: NoticeSink

    // Confined to `queue`.
    private var connection: OpaquePointer?
    private var isClosed = false
    private var transactionDepth = 0
    private var prepared = PreparedStatements()

    /// Connects, blocking for at most ``PostgresConfiguration/connectTimeoutSeconds``, and sets the
    /// session time zone to UTC.
    ///
    /// - Parameters:
    ///   - configuration: Server address, credentials and database.
    ///   - label: Names the connection's dispatch queue and its log metadata.
    ///   - logger: Receives server NOTICEs (at `debug`) and reconnect events; defaults to the
    ///     task-local `Logger.current`.
    /// - Throws: ``PostgresError`` with code ``PostgresError/Code/connectionFailed``.
    public convenience init(configuration: PostgresConfiguration, label: String = "postgres", logger: Logger = Logger.current) throws {
        self.init(unconnected: configuration, label: label, logger: logger)
        _ = try onQueue { try self.liveConnection() }
    }

    /// Creates the connection without connecting; the first call connects. Used by the pool so
    /// that creating it never blocks an async caller.
    init(unconnected configuration: PostgresConfiguration, label: String, logger: Logger) {
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "postgres.connection"] = "\(label)"
        self.logger = logger
        self.notices = NoticeSink(logger: logger)
        self.queue = ConfinedQueue(label: "receiptq.libpq.\(label)")
    }

    deinit {
        // No other reference exists, so touching the handle off the queue is safe here; going
        // through the queue could deadlock if the last reference dies on it.
        if let connection { PQfinish(connection) }
    }

    /// Runs one statement with its bound parameters and waits for the result. Blocking: call it
    /// from a Dispatch worker thread or inside ``withConnection(_:)``/``transaction(_:)``.
    ///
    /// - Parameter query: The statement; interpolated values are sent as text-format parameters.
    /// - Returns: The rows and affected-row count.
    /// - Throws: ``PostgresError``; ``PostgresError/isTransient`` tells whether a retry can help.
    @discardableResult
    public func query(_ query: PostgresQuery) throws -> PostgresResult {
        try onQueue { try queryOnQueue(query) }
    }

    /// Runs SQL without parameters, possibly several `;`-separated statements in one implicit
    /// transaction (`PQexec`). For migrations and other fixed SQL; never build `sql` from input.
    ///
    /// - Parameter sql: The statements.
    /// - Throws: ``PostgresError`` from the first failing statement.
    public func execute(_ sql: String) throws {
        _ = try onQueue { try executeOnQueue(sql) }
    }

    /// Runs `body` between `BEGIN` and `COMMIT`, rolling back when it throws.
    ///
    /// `body` runs on the connection's queue; use the connection it receives. A nested call
    /// becomes a savepoint. If a statement failed inside and `body` caught that error, the server
    /// has already aborted the transaction, so `COMMIT` rolls back and this throws.
    ///
    /// - Parameter body: The work to do atomically.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws (after `ROLLBACK`), or ``PostgresError`` from `BEGIN`/`COMMIT`.
    ///   A ``PostgresError/Code/connectionLost`` from `COMMIT` means the outcome is unknown.
    public func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try onQueue { try transactionOnQueue(body) }
    }

    /// Runs one statement on the connection's queue without blocking the caller's thread.
    ///
    /// - Parameter query: The statement; interpolated values are sent as text-format parameters.
    /// - Returns: The rows and affected-row count.
    /// - Throws: ``PostgresError``.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresResult {
        try await onQueueAsync { try self.queryOnQueue(query) }
    }

    /// Runs `body` on the connection's queue without blocking the caller's thread; blocking calls
    /// (`query(_:)`, ``transaction(_:)``) inside it run inline.
    ///
    /// - Parameter body: Work to do with the connection.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    public func withConnection<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        // The continuation is resumed only after `body` has run, so it never outlives this call.
        try await withoutActuallyEscaping(body) { body in
            try await onQueueAsync { try body(self) }
        }
    }

    /// Closes the connection; later calls throw ``PostgresError/Code/closed``. Idempotent.
    ///
    /// Waits for a statement in flight on this connection to finish first.
    public func close() {
        onQueue {
            isClosed = true
            if let connection { PQfinish(connection) }
            connection = nil
        }
    }

    /// Like ``withConnection(_:)``, then rolls back a transaction `body` left open (say, by a
    /// manual `BEGIN`), so the next borrower of a pooled connection starts clean.
    func runPooled<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await withoutActuallyEscaping(body) { body in
            try await onQueueAsync {
                defer { self.rollbackOpenTransaction() }
                return try body(self)
            }
        }
    }

    // MARK: - Queue confinement

    private func onQueue<T>(_ body: () throws -> T) rethrows -> T { try queue.sync(body) }

    private func onQueueAsync<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await queue.async(body)
    }

    // MARK: - On-queue implementation

    /// - Parameter mayPrepareAgain: whether a stale prepared statement may be prepared again and
    ///   run once more (once: a statement prepared a moment ago that fails the same way fails).
    private func queryOnQueue(_ query: PostgresQuery, mayPrepareAgain: Bool = true) throws -> PostgresResult {
        guard let count = Int32(exactly: query.binds.count) else { throw PostgresError.from(.invalidQuery("too many parameters")) }
        try Self.checkNoNUL(query.sql)
        let connection = try liveConnection()
        let name = try preparedName(for: query, count: count, on: connection)
        let executed = try Self.withParameterValues(query.binds) { values, lengths, formats in
            if let name { return PQexecPrepared(connection, name, count, values, lengths, formats, 0) }
            return PQexecParams(connection, query.sql, count, nil, values, lengths, formats, 0)
        }
        let textBinds = query.binds.map { $0?.text }
        guard let result = executed else {
            throw PostgresError.from(.statement(result: nil, connection: connection, binds: textBinds))
        }
        defer { PQclear(result) }
        do {
            try check(result, connection: connection, binds: textBinds)
        } catch let error as PostgresError where name != nil && Self.isStalePlan(error) {
            // A migration changed what the statement reads since it was prepared. Outside a
            // transaction nothing ran, so preparing it again and running it once more is safe.
            prepared.forget(query.sql)
            guard transactionDepth == 0, mayPrepareAgain else { throw error }
            return try queryOnQueue(query, mayPrepareAgain: false)
        }
        return Self.makeResult(result)
    }

    /// The name `query` runs under as a prepared statement in this session (preparing it first),
    /// or nil to run it unprepared: prepared statements are off, it has no parameters, or the
    /// session holds as many as it keeps.
    private func preparedName(for query: PostgresQuery, count: Int32, on connection: OpaquePointer) throws -> String? {
        guard configuration.preparesStatements, count > 0 else { return nil }
        if let name = prepared.name(for: query.sql) { return name }
        guard let name = prepared.reserveName() else { return nil }
        // Parameter types come from the statement's own casts, as with PQexecParams.
        guard let result = PQprepare(connection, name, query.sql, count, nil) else {
            throw PostgresError.from(.statement(result: nil, connection: connection, binds: []))
        }
        defer { PQclear(result) }
        try check(result, connection: connection, binds: [])
        prepared.record(name, for: query.sql)
        return name
    }

    /// "cached plan must not change result type": the statement's tables changed under it.
    private static func isStalePlan(_ error: PostgresError) -> Bool {
        error.sqlState == "0A000" && error.message.contains("cached plan")
    }

    /// Runs parameterless SQL and returns its command tag (`COMMIT`, `ROLLBACK`, `INSERT 0 1`…).
    private func executeOnQueue(_ sql: String) throws -> String {
        try Self.checkNoNUL(sql)
        let connection = try liveConnection()
        guard let result = PQexec(connection, sql) else {
            throw PostgresError.from(.statement(result: nil, connection: connection, binds: []))
        }
        defer { PQclear(result) }
        try check(result, connection: connection, binds: [])
        return PQcmdStatus(result).map { String(cString: $0) } ?? ""
    }

    private func transactionOnQueue<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let depth = transactionDepth
        let savepoint = "receiptq_savepoint_\(depth)"
        _ = try executeOnQueue(depth == 0 ? "BEGIN" : "SAVEPOINT \(savepoint)")
        // Depth stays raised through COMMIT too: a connection lost before COMMIT must fail the
        // COMMIT, not reconnect and "commit" an empty session.
        transactionDepth = depth + 1
        defer { transactionDepth = depth }
        let value: T
        do {
            value = try body(self)
        } catch {
            rollbackQuietly(depth == 0 ? "ROLLBACK" : "ROLLBACK TO SAVEPOINT \(savepoint); RELEASE SAVEPOINT \(savepoint)")
            throw error
        }
        let tag = try executeOnQueue(depth == 0 ? "COMMIT" : "RELEASE SAVEPOINT \(savepoint)")
        if depth == 0, tag == "ROLLBACK" { throw PostgresError.from(.transactionAborted) }
        return value
    }

    /// Best effort: the caller is already throwing the error that matters.
    private func rollbackQuietly(_ sql: String) {
        guard let connection, PQstatus(connection) == CONNECTION_OK, let result = PQexec(connection, sql) else { return }
        PQclear(result)
    }

    private func rollbackOpenTransaction() {
        guard let connection, PQstatus(connection) == CONNECTION_OK else { return }
        let status = PQtransactionStatus(connection)
        if status == PQTRANS_INTRANS || status == PQTRANS_INERROR {
            logger.debug("Rolling back a Postgres transaction left open")
            rollbackQuietly("ROLLBACK")
        }
    }

    /// Returns a usable `PGconn`: connects on first use, and resets once a connection the server
    /// dropped. Outside this method nothing reconnects.
    private func liveConnection() throws -> OpaquePointer {
        guard !isClosed else { throw PostgresError.from(.closed) }
        // Inside a transaction a new session would run the remaining statements outside it.
        if transactionDepth > 0, connection.map({ PQstatus($0) != CONNECTION_OK }) ?? true {
            throw PostgresError.from(.lostInTransaction)
        }
        guard let connection else {
            let connection = try connect()
            self.connection = connection
            prepared.removeAll()
            logger.debug("Postgres connected", metadata: ["postgres.host": "\(configuration.host)", "postgres.port": "\(configuration.port)"])
            return connection
        }
        // Outside a transaction, a session the server has closed since its last statement (a
        // restart, pg_terminate_backend) is found now, while a fresh one can still take the
        // statement; otherwise the statement would be sent into the dead socket and fail.
        if transactionDepth == 0 { Self.readClosingMessages(connection) }
        if PQstatus(connection) == CONNECTION_OK { return connection }
        logger.info("Postgres connection lost; resetting")
        PQreset(connection)
        prepared.removeAll()
        guard PQstatus(connection) == CONNECTION_OK else { throw PostgresError.from(.connect(connection)) }
        // PQreset opens a new session: session settings must be applied again.
        try setUpSession(connection)
        return connection
    }

    /// Reads what the server sent an idle session, without blocking: nothing, usually (one `poll`
    /// that finds the socket quiet). A server that ends the session sends its reason (an ERROR,
    /// which goes to the notice processor) and then closes: the first read takes the reason, a
    /// later one meets the end of the stream, and libpq marks the connection `CONNECTION_BAD`.
    /// Bounded, so a server that keeps sending notices cannot hold the caller here.
    private static func readClosingMessages(_ connection: OpaquePointer) {
        for _ in 0..<4 {
            guard PQstatus(connection) == CONNECTION_OK else { return }
            var descriptor = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
            guard descriptor.fd >= 0, poll(&descriptor, 1, 0) > 0 else { return }
            // 0: the read failed or met the end; libpq has already marked the connection bad.
            guard PQconsumeInput(connection) == 1 else { return }
        }
    }

    private func connect() throws -> OpaquePointer {
        let parameters = configuration.connectionParameters
        guard !parameters.contains(where: { $0.value.utf8.contains(0) || $0.keyword.utf8.contains(0) }) else {
            throw PostgresError.from(.invalidConfiguration("a connection parameter contains a NUL byte"))
        }
        // Keyword/value arrays, never a conninfo string: values need no quoting and cannot
        // inject options. expand_dbname = 0 keeps a dbname like "host=evil" a plain name.
        let connected = try Self.withParameterValues(parameters.map { .text($0.keyword) } + [nil]) { keywords, _, _ in
            try Self.withParameterValues(parameters.map { .text($0.value) } + [nil]) { values, _, _ in
                PQconnectdbParams(keywords, values, 0)
            }
        }
        guard let connection = connected else { throw PostgresError.from(.allocation) }
        guard PQstatus(connection) == CONNECTION_OK else {
            let error = PostgresError.from(.connect(connection))
            PQfinish(connection)
            throw error
        }
        // Without a processor libpq prints NOTICEs ("table … does not exist, skipping") to stderr.
        PQsetNoticeProcessor(
            connection,
            { context, message in
                guard let context, let message else { return }
                Unmanaged<NoticeSink>.fromOpaque(context).takeUnretainedValue().receive(message)
            },
            Unmanaged.passUnretained(notices).toOpaque()
        )
        do {
            try setUpSession(connection)
        } catch {
            PQfinish(connection)
            throw error
        }
        return connection
    }

    /// Settings every session needs; re-run after each `PQreset`.
    private func setUpSession(_ connection: OpaquePointer) throws {
        // timestamptz values then print as "…+00", which PostgresRow.date(_:) parses exactly.
        guard let result = PQexec(connection, "SET TIME ZONE 'UTC'") else {
            throw PostgresError.from(.connect(connection))
        }
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_COMMAND_OK else {
            throw PostgresError.from(.connect(connection))
        }
    }

    private func check(_ result: OpaquePointer, connection: OpaquePointer, binds: [String?]) throws {
        let status = PQresultStatus(result)
        switch status {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            // The session is stuck in COPY mode; a fresh one is cheaper than draining it.
            PQfinish(connection)
            self.connection = nil
            throw PostgresError.from(.unexpectedStatus("COPY"))
        default:
            throw PostgresError.from(.statement(result: result, connection: connection, binds: binds))
        }
    }

    // MARK: - Conversions

    /// Copies `binds` into C memory that lives exactly as long as `body` (freed in defer), so no
    /// pointer escapes a `withCString` scope, with each value's length and format (0 text, 1 binary)
    /// as `PQexecParams` takes them. `nil` stays NULL (SQL `NULL`).
    private static func withParameterValues<R>(
        _ binds: [PostgresBind?], _ body: ([UnsafePointer<CChar>?], [Int32], [Int32]) throws -> R
    ) throws -> R {
        var copies: [UnsafeMutablePointer<CChar>?] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
        copies.reserveCapacity(binds.count)
        lengths.reserveCapacity(binds.count)
        formats.reserveCapacity(binds.count)
        defer { for copy in copies { free(copy) } }
        for bind in binds {
            switch bind {
            case nil:
                copies.append(nil)
                lengths.append(0)
                formats.append(0)
            case .text(let string):
                guard let copy = strdup(string) else { throw PostgresError.from(.allocation) }
                copies.append(copy)
                lengths.append(0)
                formats.append(0)
                // A C string silently ends at a NUL (the server rejects 0x00 in text anyway): a copy
                // shorter than the value held one. libc's strlen, not a Swift scan of the bytes: the
                // batched columns run to hundreds of kilobytes, and the scan was 3 % of the worker's CPU.
                guard strlen(copy) == string.utf8.count else { throw PostgresError.from(.nulInBind) }
            case .array(let array):
                if array.containsNUL { throw PostgresError.from(.nulInBind) }
                if array.containsOutOfRange { throw PostgresError.from(.outOfRangeInBind) }
                guard let length = Int32(exactly: array.encodedCount), let copy = malloc(array.encodedCount) else {
                    throw PostgresError.from(.allocation)
                }
                array.writeEncoded(to: copy)
                copies.append(copy.assumingMemoryBound(to: CChar.self))
                lengths.append(length)
                formats.append(1)
            }
        }
        return try body(copies.map { $0.map { UnsafePointer($0) } }, lengths, formats)
    }

    /// libpq takes SQL as a C string, which would silently end at a NUL.
    private static func checkNoNUL(_ sql: String) throws {
        if sql.utf8.contains(0) { throw PostgresError.from(.invalidQuery("SQL text contains a NUL byte")) }
    }

    private static func makeResult(_ result: OpaquePointer) -> PostgresResult {
        let rowCount = PQntuples(result)
        let columnCount = PQnfields(result)
        let columns = (0..<columnCount).map { PQfname(result, $0).map { String(cString: $0) } ?? "" }
        var columnIndex: [String: Int] = [:]
        for (index, name) in columns.enumerated() where columnIndex[name] == nil {
            columnIndex[name] = index
        }
        let rows = (0..<rowCount).map { row in
            PostgresRow(
                columnIndex: columnIndex,
                values: (0..<columnCount).map { column -> String? in
                    guard PQgetisnull(result, row, column) == 0, let value = PQgetvalue(result, row, column) else { return nil }
                    let length = Int(PQgetlength(result, row, column))
                    return String(decoding: UnsafeRawBufferPointer(start: value, count: length), as: UTF8.self)
                }
            )
        }
        let affected = PQcmdTuples(result).flatMap { Int(String(cString: $0)) } ?? 0
        return PostgresResult(rows: rows, affectedRows: affected, columns: columns)
    }
}

/// Receives server NOTICE/WARNING messages from libpq's C callback and logs them.
final class NoticeSink: Sendable {
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    func receive(_ message: UnsafePointer<CChar>) {
        var text = String(cString: message)
        while text.last?.isNewline == true { text.removeLast() }
        logger.debug("Postgres notice", metadata: ["postgres.notice": "\(text)"])
    }
}
