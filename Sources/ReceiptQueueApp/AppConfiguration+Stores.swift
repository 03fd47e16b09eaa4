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
            // Above the workers' blocking reserve (0.5 s): the server answers a BLMOVE only when
            // its block time is over.
            commandTimeout: .milliseconds(try environment.int("REDIS_COMMAND_TIMEOUT_MS", 10_000, range: 1000...600_000)))
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

    /// The API's Redis (the intake's pushes, its reads, the doors' throttle): `redis` with the
    /// intake's own command timeout (`REDIS_INTAKE_COMMAND_TIMEOUT_MS`, 2000), short because a
    /// client waits on each of these commands. A frozen primary then costs a request this long
    /// (a 503, and the client's retry is idempotent), then the connect timeout while the sentinels
    /// still name it, not the workers' ten seconds per request for the whole partition. It must
    /// exceed `REDIS_REPLICA_ACK_TIMEOUT_MS` when replicas are waited for: the intake's `WAIT`
    /// answers only once that is over.
    static func intakeRedis(_ environment: EnvironmentReader, redis: RedisConfiguration, replicas: Replicas) throws -> RedisConfiguration {
        let timeout = try environment.int("REDIS_INTAKE_COMMAND_TIMEOUT_MS", 2000, range: 100...600_000)
        if replicas.minimum > 0, Duration.milliseconds(timeout) <= replicas.timeout {
            throw ConfigurationError(
                variable: "REDIS_INTAKE_COMMAND_TIMEOUT_MS",
                reason: "must exceed REDIS_REPLICA_ACK_TIMEOUT_MS (the intake's WAIT answers only when that is over)")
        }
        // The scheduler's enqueues wait for the replicas too, on the workers' timeout.
        if replicas.minimum > 0, let commands = redis.commandTimeout, commands <= replicas.timeout {
            throw ConfigurationError(
                variable: "REDIS_COMMAND_TIMEOUT_MS",
                reason: "must exceed REDIS_REPLICA_ACK_TIMEOUT_MS (the scheduler's WAIT answers only when that is over)")
        }
        var intake = redis
        intake.commandTimeout = .milliseconds(timeout)
        return intake
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
