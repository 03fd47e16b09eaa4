import AppStoreClient
import Dashboard
import Foundation
import Hiredis
import IngestAPI
import Libpq
import Logging
import ReceiptCore
import RedisJobQueue
import Telemetry
import WebhookClient

/// Every setting of receiptq, read from environment variables (12-factor). Each has a default that
/// works with `scripts/services`; the README's configuration table lists them.
///
/// Secrets (`REDIS_PASSWORD`, `REDIS_SENTINEL_PASSWORD`, `POSTGRES_PASSWORD`, `SOFTPHONE_NONCE_SECRET`, `DASHBOARD_PASSWORD`) are never printed:
/// `description` redacts them.
public struct AppConfiguration: Sendable, CustomStringConvertible {
    /// `development` or `production` (`RECEIPTQ_ENV`).
    public var environment: String
    public var httpHost: String
    public var httpPort: Int
    /// Redis: one address (`REDIS_HOSTNAME`, `REDIS_PORT`), or the primary the sentinels name
    /// (`REDIS_SENTINELS`, `REDIS_MASTER_NAME` = `receiptq`, `REDIS_SENTINEL_PASSWORD`).
    public var redis: RedisConfiguration
    /// Replicas that must hold each intake pipeline's jobs before the API answers 2xx
    /// (`REDIS_MIN_REPLICAS_ACK`, 0: none), and how long it waits for them
    /// (`REDIS_REPLICA_ACK_TIMEOUT_MS`, 1000) before answering 503.
    public var redisMinReplicasAck: Int
    public var redisReplicaAckTimeout: Duration
    public var keys: RedisKeys
    public var postgres: PostgresConfiguration
    public var appStore: AppStoreClient.Configuration
    /// The App Store Server API (`APPSTORE_SERVER_API_PRODUCTION_URL` / `_SANDBOX_URL`; default: the mock).
    public var serverAPI: ServerAPIClient.Configuration
    /// Seals and opens the apps' In-App Purchase keys (`RECEIPTQ_SECRETS_KEY`: 32 bytes, base64);
    /// nil when unset, and then no key can be stored or used. Secret: never printed.
    public var secretsKey: [UInt8]?
    /// True when `APPSTORE_PRODUCTION_URL` was not set: `all` then starts the in-process mock App Store.
    public var appStoreIsDefaultMock: Bool
    public var mockAppStorePort: Int
    public var workerConcurrency: Int
    public var workerShutdownTimeout: Duration
    /// Committer threads per worker process (`WORKER_COMMITTERS`), each a Postgres transaction at a time.
    public var workerCommitters: Int
    /// How long a committer lets a batch gather answers (`WORKER_COMMIT_LINGER_MS`).
    public var workerCommitLinger: Duration
    /// How long a worker lane's heartbeat lives; the janitor requeues its jobs once it lapses.
    public var workerHeartbeatTTLSeconds: Int
    /// 404/410 answers in a row, across the deployment, before `verifyReceipt` counts as gone.
    public var verifyReceiptGoneAfter: Int
    /// The most of `WORKER_CONCURRENCY` bulk imports' validations may hold, in percent
    /// (`IMPORT_SHARE_PERCENT`, 25); they get it only when the live queues leave slots free.
    public var importSharePercent: Int
    /// Validations per second each app's bulk imports may start across the deployment
    /// (`IMPORT_RATE_PER_SECOND`, 50; 0: no budget of their own), apart from live traffic's: one
    /// call to Apple each, two for a sandbox receipt (production answers 21007 first).
    public var importRatePerSecond: Double
    public var retryPolicy: RetryPolicy
    /// When the shared Apple outage circuit opens and how long it stays open (`CIRCUIT_*`).
    public var circuitPolicy: CircuitPolicy
    /// When subscriptions are polled again (`REPOLL_LEAD_*`, `REPOLL_JITTER`, `REPOLL_TROUBLE_INTERVAL_SECONDS`).
    public var repollPolicy: RepollPolicy
    /// Re-polls per second across every scheduler replica (`REPOLL_RATE_PER_SECOND`).
    public var repollRatePerSecond: Double
    /// Subscriptions per scheduler claim (`REPOLL_BATCH_SIZE`).
    public var repollBatchSize: Int
    /// How often the scheduler recovers missed notifications from Apple's Get Notification History
    /// (`NOTIFICATION_HISTORY_INTERVAL_SECONDS`, default 900; it also sweeps on start).
    public var notificationHistoryInterval: Duration
    /// How webhooks are delivered (`WEBHOOK_TIMEOUT_SECONDS`, default 10; `WEBHOOK_CA_FILE` to
    /// trust a private CA's receivers).
    public var webhooks: WebhookClient.Configuration
    /// How long a webhook delivery stays queued before the dispatcher looks for its job in Redis
    /// and queues it again if Redis lost it (`WEBHOOK_REQUEUE_AFTER_SECONDS`, default 600).
    public var webhookRequeueAfter: Duration
    public var api: IngestAPI.Configuration
    /// The Cloud Softphone web service (`SOFTPHONE_NONCE_SECRET`, `SOFTPHONE_NONCE_LIFETIME_SECONDS`).
    public var softphone: SoftphoneService.Configuration
    /// How long the same receipt of the same app maps to the same receipt id (`API_IDEMPOTENCY_WINDOW_SECONDS`).
    public var idempotencyWindow: Duration
    /// Who may use the dashboard and the admin API (`DASHBOARD_USERNAME`, `DASHBOARD_PASSWORD`; no
    /// default password in production).
    public var admin: AdminCredentials
    /// The dashboard's session cookies (`DASHBOARD_SESSION_SECRET`, shared by API replicas;
    /// `DASHBOARD_SESSION_HOURS`; `DASHBOARD_COOKIE_SECURE`, on by default in production).
    public var adminSessions: AdminSessions
    /// The port of the metrics listener (`METRICS_PORT`; nil: none). serve also answers
    /// `/metrics` on its API port.
    public var metricsPort: Int?
    /// The least severe log level written (`LOG_LEVEL`: `trace` … `critical`, default `info`).
    public var logLevel: Logger.Level
    /// How log lines are written (`LOG_FORMAT`: `text`, the default, or `json`).
    public var logFormat: LogFormat
    /// A directory of PEM certificates trusted for receipt signatures (Apple's roots and
    /// intermediates); nil until configured. receiptq ships no Apple certificate.
    public var trustRootsDirectory: String?

    /// Reads the configuration.
    /// - Parameter environment: the variables (default: the process environment).
    /// - Throws: `ConfigurationError` naming the variable whose value is not valid.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        func string(_ key: String, _ fallback: String) -> String {
            guard let value = environment[key], !value.isEmpty else { return fallback }
            return value
        }
        func int(_ key: String, _ fallback: Int, range: ClosedRange<Int> = 0...Int.max) throws -> Int {
            guard let text = environment[key], !text.isEmpty else { return fallback }
            guard let value = Int(text), range.contains(value) else {
                throw ConfigurationError(variable: key, reason: "must be an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            return value
        }
        /// One of a fixed set of names (case-insensitive); the error lists them, never the value.
        func choice<Value: RawRepresentable & CaseIterable>(_ key: String, _ fallback: Value) throws -> Value
        where Value.RawValue == String {
            guard let text = environment[key], !text.isEmpty else { return fallback }
            guard let value = Value(rawValue: text.lowercased()) else {
                throw ConfigurationError(
                    variable: key, reason: "must be one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return value
        }
        func double(_ key: String, _ fallback: Double, range: ClosedRange<Double>) throws -> Double {
            guard let text = environment[key], !text.isEmpty else { return fallback }
            // `Double("nan")` parses, and NaN is in no range, so this also refuses it.
            guard let value = Double(text), range.contains(value) else {
                throw ConfigurationError(variable: key, reason: "must be a decimal number in \(range.lowerBound)...\(range.upperBound)")
            }
            return value
        }
        self.environment = string("RECEIPTQ_ENV", "development")
        httpHost = string("HTTP_HOST", "127.0.0.1")
        httpPort = try int("HTTP_PORT", 8080, range: 0...65535)
        redis = RedisConfiguration(
            host: string("REDIS_HOSTNAME", "127.0.0.1"), port: try int("REDIS_PORT", 16379, range: 1...65535),
            password: environment["REDIS_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 },
            connectTimeout: .milliseconds(try int("REDIS_CONNECT_TIMEOUT_MS", 2000, range: 1...600_000)),
            commandTimeout: .seconds(10))
        if let text = environment["REDIS_SENTINELS"], !text.isEmpty {
            guard let sentinels = RedisSentinelConfiguration.Endpoint.list(text) else {
                throw ConfigurationError(variable: "REDIS_SENTINELS", reason: "must be host:port[,host:port…] with ports in 1...65535")
            }
            redis.sentinel = RedisSentinelConfiguration(
                sentinels: sentinels, masterName: string("REDIS_MASTER_NAME", "receiptq"),
                password: environment["REDIS_SENTINEL_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 })
        }
        keys = RedisKeys(prefix: string("REDIS_KEY_PREFIX", "{rq}"))
        redisMinReplicasAck = try int("REDIS_MIN_REPLICAS_ACK", 0, range: 0...16)
        redisReplicaAckTimeout = .milliseconds(try int("REDIS_REPLICA_ACK_TIMEOUT_MS", 1000, range: 1...60_000))
        let hostPorts = try Self.postgresServers(hosts: string("POSTGRES_HOSTNAME", "127.0.0.1"), ports: string("POSTGRES_PORT", "15432"))
        let sessionAttributes =
            (environment["POSTGRES_TARGET_SESSION_ATTRS"] ?? "").isEmpty
            ? nil : try choice("POSTGRES_TARGET_SESSION_ATTRS", TargetSessionAttributes.readWrite).rawValue
        postgres = PostgresConfiguration(
            host: hostPorts[0].host, port: hostPorts[0].port,
            user: string("POSTGRES_USER", "receiptq"),
            password: environment["POSTGRES_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 },
            database: string("POSTGRES_DB", "receiptq"), otherHosts: Array(hostPorts.dropFirst()),
            targetSessionAttributes: sessionAttributes)
        guard let prepares = Bool(string("POSTGRES_PREPARED_STATEMENTS", "true").lowercased()) else {
            throw ConfigurationError(variable: "POSTGRES_PREPARED_STATEMENTS", reason: "must be true or false")
        }
        postgres.preparesStatements = prepares
        mockAppStorePort = try int("MOCK_APPSTORE_PORT", 9090, range: 0...65535)
        appStoreIsDefaultMock = (environment["APPSTORE_PRODUCTION_URL"] ?? "").isEmpty
        let mockBase = "http://127.0.0.1:\(mockAppStorePort)"
        appStore = AppStoreClient.Configuration(
            productionURL: string("APPSTORE_PRODUCTION_URL", "\(mockBase)/verifyReceipt"),
            sandboxURL: string("APPSTORE_SANDBOX_URL", "\(mockBase)/sandbox/verifyReceipt"),
            connectTimeout: .milliseconds(try int("APPSTORE_CONNECT_TIMEOUT_MS", 5000, range: 1...600_000)),
            requestTimeout: .milliseconds(try int("APPSTORE_REQUEST_TIMEOUT_MS", 30_000, range: 1...600_000)),
            caInfo: environment["APPSTORE_CA_FILE"].flatMap { $0.isEmpty ? nil : $0 })
        // A deployment pointed at Apple's verifyReceipt gets Apple's Server API too; the mock otherwise.
        let serverAPIDefault =
            appStoreIsDefaultMock
            ? ServerAPIClient.Configuration(productionURL: "\(mockBase)/storekit/production", sandboxURL: "\(mockBase)/storekit/sandbox")
            : ServerAPIClient.Configuration.apple
        serverAPI = ServerAPIClient.Configuration(
            productionURL: string("APPSTORE_SERVER_API_PRODUCTION_URL", serverAPIDefault.productionURL),
            sandboxURL: string("APPSTORE_SERVER_API_SANDBOX_URL", serverAPIDefault.sandboxURL),
            connectTimeout: appStore.connectTimeout, requestTimeout: appStore.requestTimeout, caInfo: appStore.caInfo)
        if let text = environment["RECEIPTQ_SECRETS_KEY"], !text.isEmpty {
            guard let key = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), key.count == 32 else {
                throw ConfigurationError(variable: "RECEIPTQ_SECRETS_KEY", reason: "must be 32 bytes in base64 (openssl rand -base64 32)")
            }
            secretsKey = Array(key)
        }
        workerConcurrency = try int("WORKER_CONCURRENCY", 16, range: 1...4096)
        workerShutdownTimeout = .seconds(try int("WORKER_SHUTDOWN_TIMEOUT_SECONDS", 25, range: 0...3600))
        workerCommitters = try int("WORKER_COMMITTERS", 2, range: 1...64)
        workerCommitLinger = .milliseconds(try int("WORKER_COMMIT_LINGER_MS", 20, range: 0...1000))
        workerHeartbeatTTLSeconds = try int("WORKER_HEARTBEAT_TTL_SECONDS", 30, range: 2...3600)
        verifyReceiptGoneAfter = try int("VERIFY_RECEIPT_GONE_AFTER", 20, range: 1...1_000_000)
        importSharePercent = try int("IMPORT_SHARE_PERCENT", 25, range: 0...100)
        importRatePerSecond = Double(try int("IMPORT_RATE_PER_SECOND", 50, range: 0...100_000))
        retryPolicy = RetryPolicy(
            base: .milliseconds(try int("RETRY_BASE_MS", 2000, range: 1...3_600_000)),
            cap: .seconds(try int("RETRY_MAX_BACKOFF_SECONDS", 3600, range: 1...86_400)),
            maxAge: .seconds(try int("RETRY_MAX_AGE_HOURS", 72, range: 1...8760) * 3600),
            malformedAttempts: try int("RETRY_21002_MAX_ATTEMPTS", 5, range: 1...1000))
        let openSeconds = try int("CIRCUIT_OPEN_SECONDS", 10, range: 1...86_400)
        let maximumOpenSeconds = try int("CIRCUIT_MAX_OPEN_SECONDS", 300, range: 1...86_400)
        guard maximumOpenSeconds >= openSeconds else {
            // CircuitPolicy would quietly raise it to the first open period; say so instead.
            throw ConfigurationError(variable: "CIRCUIT_MAX_OPEN_SECONDS", reason: "must be at least CIRCUIT_OPEN_SECONDS")
        }
        circuitPolicy = CircuitPolicy(
            // At most 300 one-second buckets: CircuitPolicy would cut a longer window silently.
            window: .seconds(try int("CIRCUIT_WINDOW_SECONDS", 30, range: 1...300)),
            minimumFailures: try int("CIRCUIT_MIN_FAILURES", 20, range: 1...1_000_000),
            failureRatio: try double("CIRCUIT_FAILURE_RATIO", 0.8, range: 0...1),
            openDuration: .seconds(openSeconds), maximumOpenDuration: .seconds(maximumOpenSeconds),
            probeLease: .seconds(try int("CIRCUIT_PROBE_LEASE_SECONDS", 30, range: 1...3600)))
        repollPolicy = RepollPolicy(
            leadFraction: try double("REPOLL_LEAD_FRACTION", 0.05, range: 0...0.5),
            maxLead: .seconds(try int("REPOLL_MAX_LEAD_SECONDS", 86_400, range: 1...(30 * 86_400))),
            troubleInterval: .seconds(try int("REPOLL_TROUBLE_INTERVAL_SECONDS", 86_400, range: 60...(30 * 86_400))),
            jitter: try double("REPOLL_JITTER", 0.25, range: 0...1))
        repollRatePerSecond = try double("REPOLL_RATE_PER_SECOND", 50, range: 0.01...100_000)
        repollBatchSize = try int("REPOLL_BATCH_SIZE", 500, range: 1...10_000)
        notificationHistoryInterval = .seconds(try int("NOTIFICATION_HISTORY_INTERVAL_SECONDS", 900, range: 10...86_400))
        webhooks = WebhookClient.Configuration(
            timeout: .seconds(try int("WEBHOOK_TIMEOUT_SECONDS", 10, range: 1...120)),
            caInfo: environment["WEBHOOK_CA_FILE"].flatMap { $0.isEmpty ? nil : $0 })
        // At most a day: the markers the check keeps alive last four.
        webhookRequeueAfter = .seconds(try int("WEBHOOK_REQUEUE_AFTER_SECONDS", 600, range: 1...86_400))
        api = IngestAPI.Configuration(
            syncWait: .milliseconds(try int("API_SYNC_WAIT_MS", 2000, range: 0...60_000)),
            maxBodyBytes: try int("API_MAX_BODY_BYTES", 1 << 20, range: 1024...(64 << 20)),
            trustedProxyHeader: environment["API_TRUSTED_PROXY_HEADER"].flatMap { $0.isEmpty ? nil : $0 })
        // Digest nonces are checked with this key; replicas behind one load balancer must share it.
        let nonceSecret = environment["SOFTPHONE_NONCE_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        if let nonceSecret, nonceSecret.utf8.count < 32 {
            throw ConfigurationError(variable: "SOFTPHONE_NONCE_SECRET", reason: "must be at least 32 characters")
        }
        softphone = SoftphoneService.Configuration(
            nonceSecret: nonceSecret.map { Array($0.utf8) },
            nonceLifetime: .seconds(try int("SOFTPHONE_NONCE_LIFETIME_SECONDS", 300, range: 10...86_400)))
        idempotencyWindow = .seconds(try int("API_IDEMPOTENCY_WINDOW_SECONDS", 86_400, range: 1...(30 * 86_400)))
        let adminPassword = environment["DASHBOARD_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
        if self.environment == "production" {
            guard let adminPassword, adminPassword.count >= 12 else {
                throw ConfigurationError(variable: "DASHBOARD_PASSWORD", reason: "must be set in production (at least 12 characters)")
            }
        }
        // Development only: a documented local default, refused in production above.
        admin = AdminCredentials(username: string("DASHBOARD_USERNAME", "admin"), password: adminPassword ?? "receiptq-dev")
        // Without a shared secret each API process signs with its own random key: a session then
        // holds only on the replica that issued it (and ends when that process restarts).
        let sessionSecret = environment["DASHBOARD_SESSION_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        if let sessionSecret, sessionSecret.utf8.count < 32 {
            throw ConfigurationError(variable: "DASHBOARD_SESSION_SECRET", reason: "must be at least 32 characters")
        }
        let secureDefault = self.environment == "production" ? "true" : "false"
        guard let secureCookies = Bool(string("DASHBOARD_COOKIE_SECURE", secureDefault).lowercased()) else {
            throw ConfigurationError(variable: "DASHBOARD_COOKIE_SECURE", reason: "must be true or false")
        }
        adminSessions = AdminSessions(
            credentials: admin, secret: sessionSecret.map { Array($0.utf8) },
            lifetime: .seconds(try int("DASHBOARD_SESSION_HOURS", 8, range: 1...168) * 3600), secureCookies: secureCookies)
        metricsPort = (environment["METRICS_PORT"] ?? "").isEmpty ? nil : try int("METRICS_PORT", 0, range: 0...65535)
        logLevel = try choice("LOG_LEVEL", Logger.Level.info)
        logFormat = try choice("LOG_FORMAT", LogFormat.text)
        trustRootsDirectory = environment["RECEIPTQ_TRUST_ROOTS_DIR"].flatMap { $0.isEmpty ? nil : $0 }
        if self.environment == "production" && appStoreIsDefaultMock {
            throw ConfigurationError(
                variable: "APPSTORE_PRODUCTION_URL", reason: "must be set in production (the default is the local mock)")
        }
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

    public var description: String {
        "AppConfiguration(env: \(environment), http: \(httpHost):\(httpPort), redis: \(redis), postgres: \(postgres), "
            + "appstore: \(appStore.productionURL), workers: \(workerConcurrency))"
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
