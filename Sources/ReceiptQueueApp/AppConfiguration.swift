import AppStoreClient
import Foundation
import Hiredis
import Libpq
import ReceiptCore
import RedisJobQueue

/// Every setting of receiptq, read from environment variables (12-factor). Each has a default that
/// works with `scripts/services`; the README's configuration table lists them.
///
/// Each component reads its own variables (``API``, ``Apple``, ``Worker``, ``Scheduler``,
/// ``Webhooks``, ``Dashboard``, ``Telemetry``, Redis and Postgres); what several roles share
/// (the stores, the secrets key, the trust roots) sits at the top.
///
/// Secrets (`REDIS_PASSWORD`, `REDIS_SENTINEL_PASSWORD`, `POSTGRES_PASSWORD`, `SOFTPHONE_NONCE_SECRET`, `DASHBOARD_PASSWORD`) are never printed:
/// `description` redacts them.
public struct AppConfiguration: Sendable, CustomStringConvertible {
    /// `development` or `production` (`RECEIPTQ_ENV`).
    public var environment: String
    /// Redis: one address (`REDIS_HOSTNAME`, `REDIS_PORT`), or the primary the sentinels name
    /// (`REDIS_SENTINELS`, `REDIS_MASTER_NAME` = `receiptq`, `REDIS_SENTINEL_PASSWORD`).
    /// Its timeouts: `REDIS_CONNECT_TIMEOUT_MS` (2000), `REDIS_COMMAND_TIMEOUT_MS` (10000) for
    /// the workers, the scheduler and the tools, whose commands no client waits on.
    public var redis: RedisConfiguration
    /// The API's Redis: ``redis`` with `REDIS_INTAKE_COMMAND_TIMEOUT_MS` (2000) as its command
    /// timeout, so a frozen primary holds a request for about that long, not ten seconds.
    public var intakeRedis: RedisConfiguration
    /// Every Redis key's prefix (`REDIS_KEY_PREFIX`, `{rq}`).
    public var keys: RedisKeys
    /// The replicas an enqueue waits for (`REDIS_MIN_REPLICAS_ACK`, `REDIS_REPLICA_ACK_TIMEOUT_MS`).
    public var replicas: Replicas
    public var postgres: PostgresConfiguration
    /// `verifyReceipt`, the App Store Server API, or the local mock (`APPSTORE_*`, `MOCK_APPSTORE_PORT`).
    public var apple: Apple
    /// Seals and opens the apps' In-App Purchase keys (`RECEIPTQ_SECRETS_KEY`: 32 bytes, base64);
    /// nil when unset, and then no key can be stored or used. Secret: never printed.
    public var secretsKey: [UInt8]?
    /// `WORKER_*`, `VERIFY_RECEIPT_GONE_AFTER`, `IMPORT_*`, `RETRY_*`, `CIRCUIT_*`.
    public var worker: Worker
    /// `REPOLL_*`, `NOTIFICATION_HISTORY_INTERVAL_SECONDS`.
    public var scheduler: Scheduler
    /// `RETENTION_*`: how long each kind of data is kept.
    public var retention: Retention
    /// `WEBHOOK_*`.
    public var webhooks: Webhooks
    /// `HTTP_*` (the listen address, timeouts and connection cap), `API_*`, `SOFTPHONE_*`.
    public var api: API
    /// `DASHBOARD_*`.
    public var dashboard: Dashboard
    /// `METRICS_PORT`, `LOG_LEVEL`, `LOG_FORMAT`.
    public var telemetry: Telemetry
    /// A directory of PEM certificates trusted for receipt signatures (Apple's roots and
    /// intermediates); nil until configured. receiptq ships no Apple certificate.
    public var trustRootsDirectory: String?

    /// Reads the configuration.
    /// - Parameter environment: the variables (default: the process environment).
    /// - Throws: `ConfigurationError` naming the variable whose value is not valid.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        let reader = EnvironmentReader(variables: environment)
        self.environment = reader.string("RECEIPTQ_ENV", "development")
        let production = self.environment == "production"
        replicas = try Replicas(reader)
        (redis, intakeRedis) = try Self.commandTimeouts(reader, redis: try Self.redis(reader), replicas: replicas)
        keys = RedisKeys(
            prefix: reader.string("REDIS_KEY_PREFIX", "{rq}"),
            importRunRetention: 86_400 * Int64(try reader.int("RETENTION_IMPORT_RUNS_DAYS", 7, range: 0...RetentionPolicy.maxDays)))
        postgres = try Self.postgres(reader)
        apple = try Apple(reader)
        secretsKey = try Self.secretsKey(reader)
        worker = try Worker(reader)
        scheduler = try Scheduler(reader)
        retention = try Retention(reader)
        webhooks = try Webhooks(reader)
        api = try API(reader)
        dashboard = try Dashboard(reader, production: production)
        telemetry = try Telemetry(reader)
        trustRootsDirectory = reader["RECEIPTQ_TRUST_ROOTS_DIR"]
        if production && apple.isDefaultMock {
            throw ConfigurationError(
                variable: "APPSTORE_PRODUCTION_URL", reason: "must be set in production (the default is the local mock)")
        }
    }

    /// `RECEIPTQ_SECRETS_KEY`: 32 bytes in base64, or nil when unset.
    static func secretsKey(_ environment: EnvironmentReader) throws -> [UInt8]? {
        guard let text = environment["RECEIPTQ_SECRETS_KEY"] else { return nil }
        guard let key = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), key.count == 32 else {
            throw ConfigurationError(variable: "RECEIPTQ_SECRETS_KEY", reason: "must be 32 bytes in base64 (openssl rand -base64 32)")
        }
        return Array(key)
    }

    public var description: String {
        "AppConfiguration(env: \(environment), http: \(api.host):\(api.port), redis: \(redis), postgres: \(postgres), "
            + "appstore: \(apple.verifyReceipt.productionURL), workers: \(worker.concurrency))"
    }
}

/// A configuration variable with a value receiptq cannot use.
public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    /// The environment variable.
    public var variable: String
    /// What is wrong with it (never its value, which may be a secret).
    public var reason: String

    public var description: String { "\(variable) \(reason)" }
}

extension AppConfiguration {
    /// `psql`'s connection arguments for the configured database (`-h … -p … -U … DB`), as the
    /// demo prints them.
    public var psqlArguments: String {
        "-h \(postgres.hostList) -p \(postgres.portList) -U \(postgres.user) \(postgres.database)"
    }
}
