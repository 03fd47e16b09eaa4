/// A Redis reply, copied out of hiredis's reply tree (which is freed right after conversion).
///
/// ```swift
/// let reply = try redis.send(["LRANGE", "queue", "0", "-1"])
/// let items = reply.array?.compactMap(\.string) ?? []
/// ```
public enum RedisValue: Sendable, Equatable {
    /// A nil reply: a missing key, or a blocking command that timed out.
    case null
    /// A status reply such as `OK` or `PONG`.
    case status(String)
    /// An integer reply.
    case integer(Int)
    /// A bulk string reply, byte for byte (Redis strings are binary-safe).
    case bulk([UInt8])
    /// An array (multi-bulk) reply.
    case array([RedisValue])
    /// An error reply; only pipelines return these, a single command throws ``RedisError`` instead.
    case error(String)

    /// The bulk or status payload decoded as UTF-8, or `nil` for other replies and for bytes
    /// that are not valid UTF-8 (decoding never repairs, so a payload is never silently altered).
    public var string: String? {
        switch self {
        case .bulk(let bytes): String(validating: bytes, as: UTF8.self)
        case .status(let text): text
        default: nil
        }
    }

    /// The integer value; bulk and status replies holding a decimal number (such as `GET` of a
    /// counter) are parsed too. `nil` otherwise.
    public var int: Int? {
        switch self {
        case .integer(let value): value
        case .bulk, .status: string.flatMap { Int($0) }
        default: nil
        }
    }

    /// The elements of an array reply, or `nil` for other replies.
    public var array: [RedisValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    /// The payload of a bulk reply, or `nil` for other replies.
    public var bytes: [UInt8]? {
        if case .bulk(let bytes) = self { return bytes }
        return nil
    }

    /// Whether this is the nil reply.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}
