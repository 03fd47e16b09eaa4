import Hiredis
import Libpq
import RedisJobQueue

extension AppConfiguration {
    /// How many Redis replicas must hold a job before it counts as enqueued.
    public struct Replicas: Sendable {
        /// Replicas that must hold each intake pipeline's jobs before the API answers 2xx
        /// (`REDIS_MIN_REPLICAS_ACK`, 0: none); the scheduler's enqueues wait for them too.
        public var minimum: Int
        /// How long a pipeline waits for them (`REDIS_REPLICA_ACK_TIMEOUT_MS`, 1000) before
        /// answering 503.
        public var timeout: Duration

        init(_ environment: EnvironmentReader) throws {
            minimum = try environment.int("REDIS_MIN_REPLICAS_ACK", 0, range: 0...16)
            timeout = .milliseconds(try environment.int("REDIS_REPLICA_ACK_TIMEOUT_MS", 1000, range: 1...60_000))
        }
    }

    /// Redis: one address (`REDIS_HOSTNAME`, `REDIS_PORT`), or the primary the sentinels name
    /// (`REDIS_SENTINELS`, `REDIS_MASTER_NAME` = `receiptq`, `REDIS_SENTINEL_PASSWORD`).
    static func redis(_ environment: EnvironmentReader) throws -> RedisConfiguration {
        var redis = RedisConfiguration(
            host: environment.string("REDIS_HOSTNAME", "127.0.0.1"), port: try environment.int("REDIS_PORT", 16379, range: 1...65535),
            password: environment["REDIS_PASSWORD"],
            connectTimeout: .milliseconds(try environment.int("REDIS_CONNECT_TIMEOUT_MS", 2000, range: 1...600_000)),
            // Set by `commandTimeouts`, which knows the replicas' wait.
            commandTimeout: nil)
        if let text = environment["REDIS_SENTINELS"] {
            guard let sentinels = RedisSentinelConfiguration.Endpoint.list(text) else {
                throw ConfigurationError(variable: "REDIS_SENTINELS", reason: "must be host:port[,host:port…] with ports in 1...65535")
            }
            redis.sentinel = RedisSentinelConfiguration(
                sentinels: sentinels, masterName: environment.string("REDIS_MASTER_NAME", "receiptq"),
                password: environment["REDIS_SENTINEL_PASSWORD"])
        }
        return redis
    }

    /// The command timeouts: `redis` for the workers, the scheduler and the tools
    /// (`REDIS_COMMAND_TIMEOUT_MS`, 10000), and a copy for the API (the intake's pushes, its reads,
    /// the doors' throttle) with `REDIS_INTAKE_COMMAND_TIMEOUT_MS` (2000).
    ///
    /// The API's is short because a client waits on each of its commands: a frozen primary costs
    /// a request this long (a 503; the client's retry is idempotent), then the connect timeout
    /// while the sentinels still name it, not ten seconds for the whole partition. The workers'
    /// must exceed their blocking reserve (0.5 s: the server answers a `BLMOVE` only when its block
    /// time is over), and no client waits on it. Both must exceed `REDIS_REPLICA_ACK_TIMEOUT_MS`
    /// when replicas are waited for (a `WAIT` answers only once that is over): unset, each is
    /// raised to that plus a second; set lower, it is refused.
    static func commandTimeouts(
        _ environment: EnvironmentReader, redis: RedisConfiguration, replicas: Replicas
    ) throws -> (workers: RedisConfiguration, intake: RedisConfiguration) {
        func timeout(_ variable: String, _ fallback: Int, minimum: Int, waits: String) throws -> Duration {
            let floor = replicas.minimum > 0 ? replicas.timeout + .seconds(1) : .zero
            guard environment.isSet(variable) else { return max(.milliseconds(fallback), floor) }
            let value = Duration.milliseconds(try environment.int(variable, fallback, range: minimum...600_000))
            if replicas.minimum > 0, value <= replicas.timeout {
                throw ConfigurationError(
                    variable: variable, reason: "must exceed REDIS_REPLICA_ACK_TIMEOUT_MS (\(waits) WAIT answers only when that is over)")
            }
            return value
        }
        var workers = redis
        workers.commandTimeout = try timeout("REDIS_COMMAND_TIMEOUT_MS", 10_000, minimum: 1000, waits: "the scheduler's")
        var intake = redis
        intake.commandTimeout = try timeout("REDIS_INTAKE_COMMAND_TIMEOUT_MS", 2000, minimum: 100, waits: "the intake's")
        return (workers, intake)
    }

    /// Postgres (`POSTGRES_HOSTNAME`, `POSTGRES_PORT`, `POSTGRES_TARGET_SESSION_ATTRS`,
    /// `POSTGRES_USER`, `POSTGRES_PASSWORD`, `POSTGRES_DB`, `POSTGRES_PREPARED_STATEMENTS`).
    static func postgres(_ environment: EnvironmentReader) throws -> PostgresConfiguration {
        let hostPorts = try postgresServers(
            hosts: environment.string("POSTGRES_HOSTNAME", "127.0.0.1"), ports: environment.string("POSTGRES_PORT", "15432"))
        let sessionAttributes =
            environment.isSet("POSTGRES_TARGET_SESSION_ATTRS")
            ? try environment.choice("POSTGRES_TARGET_SESSION_ATTRS", TargetSessionAttributes.readWrite).rawValue : nil
        var postgres = PostgresConfiguration(
            host: hostPorts[0].host, port: hostPorts[0].port,
            user: environment.string("POSTGRES_USER", "receiptq"),
            password: environment["POSTGRES_PASSWORD"],
            database: environment.string("POSTGRES_DB", "receiptq"), otherHosts: Array(hostPorts.dropFirst()),
            targetSessionAttributes: sessionAttributes)
        postgres.preparesStatements = try environment.bool("POSTGRES_PREPARED_STATEMENTS", true)
        return postgres
    }

    /// libpq's `target_session_attrs` (`POSTGRES_TARGET_SESSION_ATTRS`).
    enum TargetSessionAttributes: String, CaseIterable {
        case any
        case readWrite = "read-write"
        case readOnly = "read-only"
        case primary, standby
        case preferStandby = "prefer-standby"
    }

    /// `POSTGRES_HOSTNAME` may list a primary and its standbys (libpq tries them in order and keeps
    /// to the one that suits `target_session_attrs`); `POSTGRES_PORT` is one port for all or one per host.
    static func postgresServers(hosts: String, ports: String) throws -> [(host: String, port: Int)] {
        let names = hosts.split(separator: ",", omittingEmptySubsequences: false).map { String($0.filter { $0 != " " }) }
        let numbers = try ports.split(separator: ",", omittingEmptySubsequences: false).map { text in
            guard let port = Int(text.filter { $0 != " " }), (1...65535).contains(port) else {
                throw ConfigurationError(variable: "POSTGRES_PORT", reason: "must be a port in 1...65535, or one per POSTGRES_HOSTNAME host")
            }
            return port
        }
        guard !names.contains(where: \.isEmpty) else {
            throw ConfigurationError(variable: "POSTGRES_HOSTNAME", reason: "must be a host or a comma-separated list of hosts")
        }
        guard numbers.count == 1 || numbers.count == names.count else {
            throw ConfigurationError(variable: "POSTGRES_PORT", reason: "must be one port, or one per POSTGRES_HOSTNAME host")
        }
        return names.indices.map { (host: names[$0], port: numbers.count == 1 ? numbers[0] : numbers[$0]) }
    }
}
