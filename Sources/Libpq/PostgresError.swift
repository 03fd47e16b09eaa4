internal import CLibpq

/// An error from a ``PostgresConnection``.
///
/// Compare errors by ``code`` (`==` ignores the rest), branch on ``isTransient`` to decide whether
/// to retry, and use `code.description` as a metric label: it is one of a small fixed set.
///
/// ``message`` is the server's primary message (never DETAIL, which can hold row values) with
/// bound values scrubbed out, and never includes the query text, so neither it nor
/// `description` leaks receipt data or secrets into logs.
///
/// ```swift
/// do {
///     try db.query("INSERT INTO receipts (id) VALUES (\(id))")
/// } catch let error as PostgresError where error.code == .uniqueViolation {
///     // already stored: idempotent success
/// }
/// ```
public struct PostgresError: Error, CustomStringConvertible, Equatable {
    /// What kind of failure this is; bounded, so usable as a metric label.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable {
            case connectionFailed, connectionLost, query, uniqueViolation, serializationFailure, deadlock
            case protocolError, closed, other
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Connecting (or reconnecting) failed: server down, wrong credentials, unknown database.
        public static var connectionFailed: Self { Self(.connectionFailed) }
        /// The connection dropped during the call; the statement may or may not have run.
        public static var connectionLost: Self { Self(.connectionLost) }
        /// The server rejected the statement; see ``PostgresError/sqlState``.
        public static var query: Self { Self(.query) }
        /// SQLSTATE 23505: a unique constraint was violated.
        public static var uniqueViolation: Self { Self(.uniqueViolation) }
        /// SQLSTATE 40001: a serializable transaction must be retried.
        public static var serializationFailure: Self { Self(.serializationFailure) }
        /// SQLSTATE 40P01: the transaction was chosen as a deadlock victim and may be retried.
        public static var deadlock: Self { Self(.deadlock) }
        /// libpq got a reply it cannot handle here (such as `COPY`).
        public static var protocolError: Self { Self(.protocolError) }
        /// The connection or pool was closed by its owner.
        public static var closed: Self { Self(.closed) }
        /// Anything else (out of memory, a value the text protocol cannot carry).
        public static var other: Self { Self(.other) }

        /// The code's name, e.g. `uniqueViolation`.
        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// The five-character SQLSTATE when the server sent one, e.g. `23505`.
    public var sqlState: String?
    /// The server's primary message or libpq's error, first line only, with bound values scrubbed.
    public var message: String
    /// The constraint or index a statement violated (SQLSTATE class 23), as the schema names it.
    public var constraint: String?

    init(code: Code, sqlState: String? = nil, message: String, constraint: String? = nil) {
        self.code = code
        self.sqlState = sqlState
        self.message = message
        self.constraint = constraint
    }

    /// Whether retrying the same work later can succeed: lost or failed connections, SQLSTATE
    /// class 08 (connection exception), 40001, 40P01, and 57P01–57P03 (server shutting down or
    /// starting up).
    public var isTransient: Bool {
        switch code {
        case .connectionFailed, .connectionLost, .serializationFailure, .deadlock: return true
        default: break
        }
        guard let sqlState else { return false }
        return sqlState.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(sqlState)
    }

    /// Whether the server refused the data itself: a data exception (SQLSTATE class 22, such as
    /// 22021 for a NUL in text or 22P05 for `\u0000` in jsonb) or an integrity constraint violation
    /// (class 23). The same values fail the same way every time, so retrying is pointless.
    public var isDataError: Bool {
        guard let sqlState, !isTransient else { return false }
        return sqlState.hasPrefix("22") || sqlState.hasPrefix("23")
    }

    /// A log-safe rendering of the code, SQLSTATE and scrubbed message.
    public var description: String {
        "PostgresError(\(code)\(sqlState.map { ", sqlState: \($0)" } ?? "")): \(message)"
    }

    /// Compares codes only, so `#expect(throws: PostgresError.uniqueViolation)` works.
    public static func == (lhs: PostgresError, rhs: PostgresError) -> Bool { lhs.code == rhs.code }

    /// Any error with code ``Code/connectionFailed``, for comparisons.
    public static var connectionFailed: Self { Self(code: .connectionFailed, message: "") }
    /// Any error with code ``Code/connectionLost``, for comparisons.
    public static var connectionLost: Self { Self(code: .connectionLost, message: "") }
    /// Any error with code ``Code/query``, for comparisons.
    public static var query: Self { Self(code: .query, message: "") }
    /// Any error with code ``Code/uniqueViolation``, for comparisons.
    public static var uniqueViolation: Self { Self(code: .uniqueViolation, message: "") }
    /// Any error with code ``Code/serializationFailure``, for comparisons.
    public static var serializationFailure: Self { Self(code: .serializationFailure, message: "") }
    /// Any error with code ``Code/deadlock``, for comparisons.
    public static var deadlock: Self { Self(code: .deadlock, message: "") }
    /// Any error with code ``Code/protocolError``, for comparisons.
    public static var protocolError: Self { Self(code: .protocolError, message: "") }
    /// Any error with code ``Code/closed``, for comparisons.
    public static var closed: Self { Self(code: .closed, message: "") }
    /// Any error with code ``Code/other``, for comparisons.
    public static var other: Self { Self(code: .other, message: "") }
}

extension PostgresError {
    /// Where a failure was observed; the input of the single mapping function below.
    enum Failure {
        /// `PQconnectdbParams`, `PQreset` or session setup left the connection unusable.
        case connect(OpaquePointer?)
        /// A statement failed: `result` may be NULL (libpq then explains in `PQerrorMessage`).
        case statement(result: OpaquePointer?, connection: OpaquePointer, binds: [String?])
        /// The statement cannot be sent (never echoes its text).
        case invalidQuery(String)
        /// A statement completed with a status this façade does not support.
        case unexpectedStatus(String)
        /// The connection dropped while a transaction was open, so nothing may reconnect.
        case lostInTransaction
        /// COMMIT answered ROLLBACK: an earlier statement had failed and was caught by the caller.
        case transactionAborted
        /// The configuration cannot be passed to libpq.
        case invalidConfiguration(String)
        /// A bound value contains a NUL byte, which text-format parameters cannot carry.
        case nulInBind
        /// A bound number does not fit the type its binary format names.
        case outOfRangeInBind
        /// The owner closed the connection or pool.
        case closed
        /// libpq or strdup returned NULL.
        case allocation
    }

    /// The one place that turns libpq state into a ``PostgresError``.
    static func from(_ failure: Failure) -> PostgresError {
        switch failure {
        case .connect(let connection):
            return PostgresError(code: .connectionFailed, message: connectionMessage(connection) ?? "could not connect")
        case .statement(let result, let connection, let binds):
            let sqlState = clibpq_result_sqlstate(result).map { String(cString: $0) }
            let primary = clibpq_result_primary_message(result).map { String(cString: $0) }
            let message = scrub(primary ?? connectionMessage(connection) ?? "statement failed", binds: binds, sqlState: sqlState)
            // A FATAL error such as 57P01 (pg_terminate_backend) also leaves the socket closed.
            if PQstatus(connection) == CONNECTION_BAD {
                return PostgresError(code: .connectionLost, sqlState: sqlState, message: message)
            }
            let code: Code =
                switch sqlState {
                case "23505": .uniqueViolation
                case "40001": .serializationFailure
                case "40P01": .deadlock
                case nil: .other
                default: .query
                }
            let constraint = clibpq_result_constraint_name(result).map { String(cString: $0) }
            return PostgresError(code: code, sqlState: sqlState, message: message, constraint: constraint)
        case .invalidQuery(let reason):
            return PostgresError(code: .other, message: reason)
        case .unexpectedStatus(let status):
            return PostgresError(code: .protocolError, message: "unsupported result status \(status)")
        case .lostInTransaction:
            return PostgresError(code: .connectionLost, message: "connection lost inside a transaction")
        case .transactionAborted:
            return PostgresError(
                code: .query,
                sqlState: "25P02",
                message: "transaction was aborted by an earlier error and rolled back at COMMIT"
            )
        case .invalidConfiguration(let reason):
            return PostgresError(code: .connectionFailed, message: reason)
        case .nulInBind:
            // Same SQLSTATE the server uses for a 0x00 byte in text.
            return PostgresError(code: .query, sqlState: "22021", message: "a bound value contains a NUL byte")
        case .outOfRangeInBind:
            // What the server answers for `'3000000000'::int4`.
            return PostgresError(code: .query, sqlState: "22003", message: "a bound number is out of range for its type")
        case .closed:
            return PostgresError(code: .closed, message: "connection is closed")
        case .allocation:
            return PostgresError(code: .other, message: "libpq could not allocate memory")
        }
    }

    /// The first line of `PQerrorMessage`; the rest is hints ("Is the server running…").
    private static func connectionMessage(_ connection: OpaquePointer?) -> String? {
        guard let connection, let raw = PQerrorMessage(connection) else { return nil }
        let text = String(cString: raw)
        let firstLine = text.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? ""
        return firstLine.isEmpty ? nil : firstLine
    }

    /// Removes bound values from a server message: input-syntax and range errors quote the
    /// offending value (`invalid input syntax for type integer: "…"`).
    ///
    /// A data exception (SQLSTATE class 22) loses everything from its first double quote to its
    /// last: the value it quotes may be one element of an array parameter (the batched writes bind
    /// whole columns as arrays), which matches no bind as a whole. Postgres quotes such values
    /// without escaping, so a value holding a quote or a line break is cut out whole too.
    static func scrub(_ message: String, binds: [String?], sqlState: String? = nil) -> String {
        var text = message
        if sqlState?.hasPrefix("22") == true, let first = text.firstIndex(of: "\"") {
            let last = text.lastIndex(of: "\"").flatMap { $0 > first ? $0 : nil }
            text = String(text[..<first]) + "\"<redacted>\"" + (last.map { String(text[text.index(after: $0)...]) } ?? "")
        }
        for case let value? in binds where !value.isEmpty {
            text = text.replacing("\"\(value)\"", with: "\"<redacted>\"")
            // Unquoted, only long values: a short one could match a word of the server's text.
            if value.utf8.count >= 8 { text = text.replacing(value, with: "<redacted>") }
        }
        return text.count > 512 ? String(text.prefix(512)) + "…" : text
    }
}
