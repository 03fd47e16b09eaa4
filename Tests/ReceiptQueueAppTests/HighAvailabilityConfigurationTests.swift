import Hiredis
import Libpq
import ReceiptQueueApp
import SystemTesting
import Testing

/// The settings of a replicated deployment: Redis Sentinel and a Postgres primary with standbys.
@Suite("Configuration: Redis Sentinel and Postgres failover hosts", .blockingWork)
struct HighAvailabilityConfigurationTests {
    @Test("REDIS_SENTINELS lists the sentinels (26379 when a port is left out), REDIS_MASTER_NAME names the primary; the password never prints")
    func sentinels() throws {
        let configuration = try AppConfiguration(environment: [
            "REDIS_SENTINELS": "10.0.0.5:26380, sentinel-b ,10.0.0.7:26379", "REDIS_MASTER_NAME": "payments",
            "REDIS_SENTINEL_PASSWORD": "s3cret-sentinel",
        ])
        let sentinel = try #require(configuration.redis.sentinel)
        #expect(sentinel.sentinels.map(\.description) == ["10.0.0.5:26380", "sentinel-b:26379", "10.0.0.7:26379"])
        #expect(sentinel.masterName == "payments")
        #expect(sentinel.password == "s3cret-sentinel")
        #expect(!"\(configuration)".contains("s3cret"))
        #expect("\(configuration.redis)".contains("master payments"))
        #expect(try AppConfiguration(environment: ["REDIS_SENTINELS": "127.0.0.1:26379"]).redis.sentinel?.masterName == "receiptq")
        #expect(try AppConfiguration(environment: [:]).redis.sentinel == nil, "one address unless sentinels are named")
    }

    @Test(
        "A sentinel list with an empty entry or a bad port is refused, without echoing it",
        arguments: ["a:1,,b:2", "a:0", "a:65536", "a:port", ":26379", ","])
    func badSentinels(_ value: String) {
        let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: ["REDIS_SENTINELS": value]) }
        #expect(error?.variable == "REDIS_SENTINELS")
    }

    @Test(
        "Redis timeouts: the workers' command timeout 10 s, the API's 2 s, connects 2 s; each settable; the API's copy differs only in its command timeout"
    )
    func redisTimeouts() throws {
        let defaults = try AppConfiguration(environment: [:])
        #expect(defaults.redis.commandTimeout == .seconds(10))
        #expect(defaults.intakeRedis.commandTimeout == .seconds(2))
        #expect(defaults.redis.connectTimeout == .seconds(2) && defaults.intakeRedis.connectTimeout == .seconds(2))
        let set = try AppConfiguration(environment: [
            "REDIS_COMMAND_TIMEOUT_MS": "30000", "REDIS_INTAKE_COMMAND_TIMEOUT_MS": "750", "REDIS_CONNECT_TIMEOUT_MS": "500",
            "REDIS_SENTINELS": "10.0.0.5:26379",
        ])
        #expect(set.redis.commandTimeout == .seconds(30))
        #expect(set.intakeRedis.commandTimeout == .milliseconds(750))
        #expect(set.intakeRedis.connectTimeout == .milliseconds(500))
        #expect(set.intakeRedis.sentinel?.masterName == "receiptq", "the same servers")
        // Left unset, both wait out the replicas' WAIT.
        let waiting = try AppConfiguration(environment: ["REDIS_MIN_REPLICAS_ACK": "1", "REDIS_REPLICA_ACK_TIMEOUT_MS": "15000"])
        #expect(waiting.intakeRedis.commandTimeout == .seconds(16))
        #expect(waiting.redis.commandTimeout == .seconds(16))
    }

    @Test(
        "Redis timeouts that cannot work are refused, naming the variable: below the workers' blocking reserve, not above the replicas' WAIT, not numbers",
        arguments: [
            ["REDIS_COMMAND_TIMEOUT_MS": "500"], ["REDIS_COMMAND_TIMEOUT_MS": "ten"], ["REDIS_INTAKE_COMMAND_TIMEOUT_MS": "0"],
            ["REDIS_INTAKE_COMMAND_TIMEOUT_MS": "1000", "REDIS_MIN_REPLICAS_ACK": "1"],
            [
                "REDIS_COMMAND_TIMEOUT_MS": "2000", "REDIS_REPLICA_ACK_TIMEOUT_MS": "2000", "REDIS_INTAKE_COMMAND_TIMEOUT_MS": "3000",
                "REDIS_MIN_REPLICAS_ACK": "1",
            ],
        ])
    func badRedisTimeouts(_ environment: [String: String]) {
        let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: environment) }
        #expect(
            error.map { $0.variable.hasSuffix("COMMAND_TIMEOUT_MS") && environment.keys.contains($0.variable) } == true,
            "\(String(describing: error))")
    }

    @Test("POSTGRES_HOSTNAME lists a primary and its standbys: one port for all or one each, target_session_attrs read-write by default")
    func postgresHosts() throws {
        let shared = try AppConfiguration(environment: ["POSTGRES_HOSTNAME": "pg-a, pg-b", "POSTGRES_PORT": "5432"]).postgres
        #expect(shared.hostList == "pg-a,pg-b")
        #expect(shared.portList == "5432,5432")
        let each = try AppConfiguration(environment: ["POSTGRES_HOSTNAME": "pg-a,pg-b,pg-c", "POSTGRES_PORT": "5432,5433,5434"]).postgres
        #expect(each.portList == "5432,5433,5434")
        #expect(each.targetSessionAttributes == nil)
        let primary = try AppConfiguration(environment: ["POSTGRES_HOSTNAME": "pg-a,pg-b", "POSTGRES_TARGET_SESSION_ATTRS": "primary"]).postgres
        #expect(primary.targetSessionAttributes == "primary")
        let single = try AppConfiguration(environment: [:]).postgres
        #expect(single.otherHosts.isEmpty)
        #expect(single.portList == "15432")
        #expect(single.preparesStatements)
        #expect(try AppConfiguration(environment: ["POSTGRES_PREPARED_STATEMENTS": "FALSE"]).postgres.preparesStatements == false)
    }

    @Test(
        "Postgres settings that cannot be used are refused, naming the variable",
        arguments: [
            ["POSTGRES_HOSTNAME": "a,,b"], ["POSTGRES_HOSTNAME": "a,b,c", "POSTGRES_PORT": "1,2"], ["POSTGRES_PORT": "5432,"],
            ["POSTGRES_PORT": "0"], ["POSTGRES_TARGET_SESSION_ATTRS": "writable"], ["POSTGRES_PREPARED_STATEMENTS": "no"],
        ])
    func badPostgresHosts(_ environment: [String: String]) {
        let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: environment) }
        #expect(error.map { environment.keys.contains($0.variable) } == true)
    }
}
