/// Where and how a ``RedisConnection`` connects.
///
/// ```swift
/// let config = RedisConfiguration(host: "127.0.0.1", port: 6379, commandTimeout: .seconds(10))
/// let redis = try RedisConnection(configuration: config)
/// ```
///
/// `description` never prints the password, so a configuration can be logged as is.
public struct RedisConfiguration: Sendable, CustomStringConvertible {
    /// Host name or IP address of the Redis server.
    public var host: String
    /// TCP port of the Redis server.
    public var port: Int
    /// Password sent with `AUTH` after every (re)connect; `nil` skips `AUTH`.
    public var password: String?
    /// How long a TCP connect may take before it fails with ``RedisError/Code/connectionFailed``;
    /// zero waits as long as the operating system does.
    public var connectTimeout: Duration
    /// Socket read/write timeout for each command, or `nil` (or zero) for none.
    ///
    /// It must exceed the block time of any `BLMOVE`/`BLPOP` the caller sends on the connection:
    /// the server only answers when the block time is over, and a timeout makes the connection
    /// reconnect on its next use.
    public var commandTimeout: Duration?
    /// Redis Sentinel: when set, ``host`` and ``port`` are ignored and every connection asks the
    /// sentinels where the primary is (and asks again after a failover).
    public var sentinel: RedisSentinelConfiguration?

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - host: Host name or IP address; default `127.0.0.1`.
    ///   - port: TCP port; default `6379`.
    ///   - password: `AUTH` password; default none.
    ///   - connectTimeout: TCP connect timeout; default 2 seconds.
    ///   - commandTimeout: Socket read/write timeout per command; default 10 seconds, `nil` for none.
    ///   - sentinel: The sentinels that know the primary; default none (connect to `host`).
    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        password: String? = nil,
        connectTimeout: Duration = .seconds(2),
        commandTimeout: Duration? = .seconds(10),
        sentinel: RedisSentinelConfiguration? = nil
    ) {
        self.host = host
        self.port = port
        self.password = password
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.sentinel = sentinel
    }

    /// A log-safe rendering: the password shows as `<redacted>`.
    public var description: String {
        let timeout = commandTimeout.map { "\($0)" } ?? "none"
        let address = sentinel.map { "\($0)" } ?? "host: \(host), port: \(port)"
        return "RedisConfiguration(\(address), password: \(password == nil ? "none" : "<redacted>"), "
            + "connectTimeout: \(connectTimeout), commandTimeout: \(timeout))"
    }
}
