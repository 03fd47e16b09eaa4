internal import CHiredis

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error from a ``RedisConnection``.
///
/// Compare errors by ``code`` (`==` ignores the message), and use `code.description` as a metric
/// label: it is one of a small fixed set. ``message`` comes from the server's error reply or from
/// hiredis, with command arguments scrubbed, so neither it nor `description` ever echoes a key,
/// a value or the password.
///
/// ```swift
/// do {
///     _ = try redis.send(["INCR", key])
/// } catch let error as RedisError where error.code == .server {
///     // e.g. "ERR value is not an integer or out of range"
/// }
/// ```
public struct RedisError: Error, CustomStringConvertible, Equatable {
    /// What kind of failure this is; bounded, so usable as a metric label.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable {
            case connectionFailed, io, timeout, protocolError, server, failover, closed, other
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The TCP connect, or the `AUTH` after it, failed.
        public static var connectionFailed: Self { Self(.connectionFailed) }
        /// A read or write failed, or the server closed the connection; the next call reconnects.
        public static var io: Self { Self(.io) }
        /// The command did not complete within ``RedisConfiguration/commandTimeout``; the next call reconnects.
        public static var timeout: Self { Self(.timeout) }
        /// The server sent something hiredis could not parse; the next call reconnects.
        public static var protocolError: Self { Self(.protocolError) }
        /// The server answered with an error reply, such as `WRONGTYPE` or `NOSCRIPT`.
        public static var server: Self { Self(.server) }
        /// The server is not (or no longer) a writable primary — a `READONLY`, `LOADING`,
        /// `MASTERDOWN`, `NOREPLICAS` or `UNBLOCKED` reply, or a `+switch-master` heard by the sentinel listener:
        /// a failover is under way. The command may or may not have run; the next call finds the
        /// primary again.
        public static var failover: Self { Self(.failover) }
        /// The connection or pool was closed by its owner.
        public static var closed: Self { Self(.closed) }
        /// Anything else (out of memory, invalid arguments).
        public static var other: Self { Self(.other) }

        /// The code's name, e.g. `timeout`.
        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// A human-readable reason: the server's error reply or hiredis's error string, never
    /// including command arguments.
    public var message: String

    init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// A log-safe rendering of the code and the scrubbed message.
    public var description: String { "RedisError(\(code)): \(message)" }

    /// Compares codes only, so `#expect(throws: RedisError.timeout)` and `error == .server` work.
    public static func == (lhs: RedisError, rhs: RedisError) -> Bool { lhs.code == rhs.code }

    /// Any error with code ``Code/connectionFailed``, for comparisons.
    public static var connectionFailed: Self { Self(code: .connectionFailed, message: "") }
    /// Any error with code ``Code/io``, for comparisons.
    public static var io: Self { Self(code: .io, message: "") }
    /// Any error with code ``Code/timeout``, for comparisons.
    public static var timeout: Self { Self(code: .timeout, message: "") }
    /// Any error with code ``Code/protocolError``, for comparisons.
    public static var protocolError: Self { Self(code: .protocolError, message: "") }
    /// Any error with code ``Code/server``, for comparisons.
    public static var server: Self { Self(code: .server, message: "") }
    /// Any error with code ``Code/failover``, for comparisons.
    public static var failover: Self { Self(code: .failover, message: "") }
    /// Any error with code ``Code/closed``, for comparisons.
    public static var closed: Self { Self(code: .closed, message: "") }
    /// Any error with code ``Code/other``, for comparisons.
    public static var other: Self { Self(code: .other, message: "") }

    /// Whether the connection (not the command) failed, in a way the next call's reconnect
    /// repairs: the server closed it (``Code/io``), sent something unreadable
    /// (``Code/protocolError``), or is no writable primary any more (``Code/failover``). The
    /// command may or may not have run, so only work that is safe to repeat is retried on it
    /// (``RedisConnectionPool/withConnectionRetryingOnce(_:)``). A ``Code/timeout`` is not one:
    /// retrying a server that does not answer doubles the wait.
    public var isBrokenConnection: Bool { code == .io || code == .protocolError || code == .failover }
}

extension RedisError {
    /// Where a failure was observed; the input of the single mapping function below.
    enum Failure {
        /// hiredis set `c->err`. `errno` must be captured right after the failing call, before
        /// anything (such as `redisFree`) can overwrite it.
        case context(UnsafeMutablePointer<redisContext>, errno: Int32, connecting: Bool)
        /// The server answered with an error reply to a command with these arguments.
        case reply(String, arguments: [[UInt8]], connecting: Bool)
        /// hiredis returned NULL without setting an error: only on allocation failure.
        case allocation
        /// The configuration cannot be used to connect.
        case invalidConfiguration(String)
        /// The caller passed something hiredis cannot send.
        case invalidArgument(String)
        /// The server answered as a replica or a server that cannot take writes now, or the
        /// primary moved.
        case notPrimary(String)
        /// The owner closed the connection or pool.
        case closed
    }

    /// Error replies that say the server is no writable primary (any more): a replica (`READONLY`),
    /// one loading its data (`LOADING`), one cut off from its primary (`MASTERDOWN`), a primary that
    /// lost its replicas and refuses writes (`NOREPLICAS`, `min-replicas-to-write`: most likely the
    /// old side of a partition), or a blocked command released because the server became a
    /// replica (`UNBLOCKED`).
    static func isFailoverReply(_ message: String) -> Bool {
        message.hasPrefix("READONLY") || message.hasPrefix("LOADING") || message.hasPrefix("MASTERDOWN") || message.hasPrefix("NOREPLICAS")
            || message.hasPrefix("UNBLOCKED")
    }

    /// The one place that turns hiredis state into a ``RedisError``.
    static func from(_ failure: Failure) -> RedisError {
        switch failure {
        case .context(let context, let savedErrno, let connecting):
            let reason = errorString(of: context)
            if connecting { return RedisError(code: .connectionFailed, message: reason) }
            switch context.pointee.err {
            case REDIS_ERR_IO where savedErrno == EAGAIN || savedErrno == EWOULDBLOCK:
                // SO_RCVTIMEO/SO_SNDTIMEO (set by redisSetTimeout) expire as EAGAIN; hiredis
                // reports that as a plain I/O error.
                return RedisError(code: .timeout, message: "command timed out")
            case REDIS_ERR_IO, REDIS_ERR_EOF:
                return RedisError(code: .io, message: reason)
            case REDIS_ERR_PROTOCOL:
                return RedisError(code: .protocolError, message: reason)
            default:
                return RedisError(code: .other, message: reason)
            }
        case .reply(let message, let arguments, let connecting):
            let scrubbed = scrub(message, arguments: arguments)
            if connecting { return RedisError(code: .connectionFailed, message: scrubbed) }
            return RedisError(code: isFailoverReply(message) ? .failover : .server, message: scrubbed)
        case .allocation:
            return RedisError(code: .other, message: "hiredis could not allocate memory")
        case .invalidConfiguration(let reason):
            return RedisError(code: .connectionFailed, message: reason)
        case .invalidArgument(let reason):
            return RedisError(code: .other, message: reason)
        case .notPrimary(let reason):
            return RedisError(code: .failover, message: reason)
        case .closed:
            return RedisError(code: .closed, message: "connection is closed")
        }
    }

    /// `errstr` is a fixed 128-byte array that hiredis NUL-terminates; read it bounded anyway.
    private static func errorString(of context: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafeBytes(of: context.pointee.errstr) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
    }

    /// Removes command arguments from a server error reply. Redis 7 echoes them in some replies
    /// ("ERR unknown command 'X', with args beginning with: 'secret'"), and arguments are keys,
    /// job payloads or the AUTH password.
    static func scrub(_ message: String, arguments: [[UInt8]]) -> String {
        var text = message
        if let range = text.firstRange(of: ", with args beginning with:") {
            text = String(text[..<range.lowerBound])
        }
        for argument in arguments.dropFirst() {
            guard let value = String(validating: argument, as: UTF8.self), !value.isEmpty else { continue }
            text = text.replacing("'\(value)'", with: "'<redacted>'")
            // Unquoted, only long values: a short one ("0", "list") could match a word of the
            // fixed server text and garble it, and is not worth hiding.
            if value.utf8.count >= 8 { text = text.replacing(value, with: "<redacted>") }
        }
        return text.count > 256 ? String(text.prefix(256)) + "…" : text
    }
}
