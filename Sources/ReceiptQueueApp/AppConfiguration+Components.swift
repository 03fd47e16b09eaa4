import AppStoreClient
import Dashboard
import Foundation
import HTTPServerGuard
import IngestAPI
import Logging
import ReceiptCore
import ReceiptSignature
import Telemetry
import WebhookClient

extension AppConfiguration {
    /// The ingestion API: where it listens, its requests and connections, the Cloud Softphone
    /// service, idempotency.
    public struct API: Sendable {
        /// `HTTP_HOST` (`127.0.0.1`): the API's address; the metrics listener's too.
        public var host: String
        /// `HTTP_PORT` (8080; 0: any free port).
        public var port: Int
        /// `API_SYNC_WAIT_MS`, `API_MAX_BODY_BYTES`, `API_TRUSTED_PROXY_HEADER`, `API_TRUSTED_PROXIES`.
        public var ingest: IngestAPI.Configuration
        /// How failed authentications lock out, at every door (`AUTH_THROTTLE_*`).
        public var guessing: GuessingPolicy
        /// The Cloud Softphone web service (`SOFTPHONE_NONCE_SECRET`, `SOFTPHONE_NONCE_LIFETIME_SECONDS`).
        public var softphone: SoftphoneService.Configuration
        /// How long the same receipt of the same app maps to the same receipt id (`API_IDEMPOTENCY_WINDOW_SECONDS`).
        public var idempotencyWindow: Duration
        /// What a client may take of a listener, the API's and the metrics one: `HTTP_HEADER_TIMEOUT_MS`
        /// (10000), `HTTP_BODY_TIMEOUT_MS` (20000), `HTTP_BODY_MIN_BYTES_PER_SECOND` (500),
        /// `HTTP_IDLE_TIMEOUT_MS` (75000), `HTTP_MAX_CONNECTIONS` (1000).
        public var connections: ConnectionLimits

        init(_ environment: EnvironmentReader) throws {
            host = environment.string("HTTP_HOST", "127.0.0.1")
            port = try environment.int("HTTP_PORT", 8080, range: 0...65535)
            ingest = IngestAPI.Configuration(
                syncWait: .milliseconds(try environment.int("API_SYNC_WAIT_MS", 2000, range: 0...60_000)),
                maxBodyBytes: try environment.int("API_MAX_BODY_BYTES", 1 << 20, range: 1024...(64 << 20)),
                proxies: try Self.proxies(environment))
            guessing = GuessingPolicy(
                freeFailuresPerAddress: try environment.int("AUTH_THROTTLE_FREE_FAILURES", 5, range: 1...1_000_000),
                freeFailuresPerAccount: try environment.int("AUTH_THROTTLE_ACCOUNT_FREE_FAILURES", 20, range: 1...1_000_000),
                firstLockout: .milliseconds(try environment.int("AUTH_THROTTLE_FIRST_LOCKOUT_MS", 1000, range: 1...3_600_000)),
                longestLockout: .seconds(try environment.int("AUTH_THROTTLE_LONGEST_LOCKOUT_SECONDS", 900, range: 1...86_400)),
                memory: .seconds(try environment.int("AUTH_THROTTLE_MEMORY_SECONDS", 3600, range: 1...(7 * 86_400))))
            // Digest nonces are checked with this key; replicas behind one load balancer must share it.
            softphone = SoftphoneService.Configuration(
                nonceSecret: try environment.secret("SOFTPHONE_NONCE_SECRET", minimumLength: 32).map { Array($0.utf8) },
                nonceLifetime: .seconds(try environment.int("SOFTPHONE_NONCE_LIFETIME_SECONDS", 300, range: 10...86_400)))
            idempotencyWindow = .seconds(try environment.int("API_IDEMPOTENCY_WINDOW_SECONDS", 86_400, range: 1...(30 * 86_400)))
            connections = ConnectionLimits(
                headerTimeout: .milliseconds(try environment.int("HTTP_HEADER_TIMEOUT_MS", 10_000, range: 100...600_000)),
                bodyTimeout: .milliseconds(try environment.int("HTTP_BODY_TIMEOUT_MS", 20_000, range: 100...3_600_000)),
                bodyMinimumBytesPerSecond: try environment.int("HTTP_BODY_MIN_BYTES_PER_SECOND", 500, range: 0...(1 << 30)),
                // Longer than a load balancer's usual idle timeout (60 s): the balancer, not receiptq,
                // should close an idle kept-alive connection, or it may send a request down one being closed.
                idleTimeout: .milliseconds(try environment.int("HTTP_IDLE_TIMEOUT_MS", 75_000, range: 100...3_600_000)),
                maxConnections: try environment.int("HTTP_MAX_CONNECTIONS", 1000, range: 1...1_000_000))
        }

        /// `API_TRUSTED_PROXY_HEADER` believed from `API_TRUSTED_PROXIES` (default: loopback and the
        /// private ranges, where a deployment's own load balancers live).
        static func proxies(_ environment: EnvironmentReader) throws -> TrustedProxies {
            let header = environment["API_TRUSTED_PROXY_HEADER"].flatMap { $0.isEmpty ? nil : $0 }
            guard let list = environment["API_TRUSTED_PROXIES"] else { return TrustedProxies(header: header) }
            switch TrustedProxies.parse(list) {
            case .success(let networks): return TrustedProxies(header: header, networks: networks)
            case .failure(let problem):
                throw ConfigurationError(
                    variable: "API_TRUSTED_PROXIES",
                    reason: "must list addresses or CIDR networks separated by commas; '\(problem.entry)' is neither")
            }
        }
    }

    /// Apple: `verifyReceipt` and the App Store Server API, or the local mock standing in for both.
    public struct Apple: Sendable {
        /// `MOCK_APPSTORE_PORT` (9090): where `receiptq all` runs the mock when no Apple URL is set.
        public var mockPort: Int
        /// True when `APPSTORE_PRODUCTION_URL` was not set: `all` then starts the in-process mock App Store.
        public var isDefaultMock: Bool
        /// `APPSTORE_PRODUCTION_URL`, `APPSTORE_SANDBOX_URL`, `APPSTORE_CONNECT_TIMEOUT_MS`,
        /// `APPSTORE_REQUEST_TIMEOUT_MS`, `APPSTORE_CA_FILE`.
        public var verifyReceipt: AppStoreClient.Configuration
        /// The App Store Server API (`APPSTORE_SERVER_API_PRODUCTION_URL` / `_SANDBOX_URL`; default: the mock).
        public var serverAPI: ServerAPIClient.Configuration
        /// `SERVER_API_DEFERRABLE_PERCENT` (80): the share of each app's hourly Server API budget per
        /// endpoint that work nobody waits on (re-polls, imports, the history sweep) may spend; the
        /// rest is kept for validations and support.
        public var hourlyBudget: HourlyCallBudget
        /// `RECEIPTQ_OCSP` (`soft`): the OCSP check of Apple's JWS chains: `off`, `soft` (a revoked
        /// certificate refuses; an unreachable responder lets pass, counted), `hard` (refuses too).
        public var ocsp: RevocationPolicy
        /// `RECEIPTQ_OCSP_TIMEOUT_MS` (2000): the longest one OCSP query may take.
        public var ocspTimeout: Duration
        /// `RECEIPTQ_OCSP_RETRY_SECONDS` (60): how long a failed OCSP query's verdict is kept.
        public var ocspRetry: Duration

        init(_ environment: EnvironmentReader) throws {
            mockPort = try environment.int("MOCK_APPSTORE_PORT", 9090, range: 0...65535)
            isDefaultMock = !environment.isSet("APPSTORE_PRODUCTION_URL")
            let mockBase = "http://127.0.0.1:\(mockPort)"
            verifyReceipt = AppStoreClient.Configuration(
                productionURL: environment.string("APPSTORE_PRODUCTION_URL", "\(mockBase)/verifyReceipt"),
                sandboxURL: environment.string("APPSTORE_SANDBOX_URL", "\(mockBase)/sandbox/verifyReceipt"),
                connectTimeout: .milliseconds(try environment.int("APPSTORE_CONNECT_TIMEOUT_MS", 5000, range: 1...600_000)),
                requestTimeout: .milliseconds(try environment.int("APPSTORE_REQUEST_TIMEOUT_MS", 30_000, range: 1...600_000)),
                caInfo: environment["APPSTORE_CA_FILE"])
            // A deployment pointed at Apple's verifyReceipt gets Apple's Server API too; the mock otherwise.
            let serverAPIDefault =
                isDefaultMock
                ? ServerAPIClient.Configuration(productionURL: "\(mockBase)/storekit/production", sandboxURL: "\(mockBase)/storekit/sandbox")
                : ServerAPIClient.Configuration.apple
            serverAPI = ServerAPIClient.Configuration(
                productionURL: environment.string("APPSTORE_SERVER_API_PRODUCTION_URL", serverAPIDefault.productionURL),
                sandboxURL: environment.string("APPSTORE_SERVER_API_SANDBOX_URL", serverAPIDefault.sandboxURL),
                connectTimeout: verifyReceipt.connectTimeout, requestTimeout: verifyReceipt.requestTimeout, caInfo: verifyReceipt.caInfo)
            hourlyBudget = HourlyCallBudget(
                deferrableShare: Double(try environment.int("SERVER_API_DEFERRABLE_PERCENT", 80, range: 0...100)) / 100)
            ocsp = try environment.choice("RECEIPTQ_OCSP", RevocationPolicy.soft)
            ocspTimeout = .milliseconds(try environment.int("RECEIPTQ_OCSP_TIMEOUT_MS", 2000, range: 1...60_000))
            ocspRetry = .seconds(try environment.int("RECEIPTQ_OCSP_RETRY_SECONDS", 60, range: 1...86_400))
        }
    }

    /// A `work` process: its slots and threads, the bulk imports' share, retries, the outage circuit.
    public struct Worker: Sendable {
        /// `WORKER_CONCURRENCY` (16): validations in flight per process.
        public var concurrency: Int
        /// `WORKER_SHUTDOWN_TIMEOUT_SECONDS` (25): how long SIGTERM waits for the jobs in hand.
        public var shutdownTimeout: Duration
        /// Committer threads per worker process (`WORKER_COMMITTERS`), each a Postgres transaction at a time.
        public var committers: Int
        /// How long a committer lets a batch gather answers (`WORKER_COMMIT_LINGER_MS`).
        public var commitLinger: Duration
        /// How long an idle worker blocks waiting for a validation before it looks at the other
        /// queues again (`WORKER_IDLE_WAIT_MS`, 100): the longest a notification, a webhook delivery
        /// or a re-poll waits at an idle worker, since Redis blocks on one list only.
        public var idleWait: Duration
        /// How long a worker lane's heartbeat lives; the janitor requeues its jobs once it lapses
        /// (`WORKER_HEARTBEAT_TTL_SECONDS`).
        public var heartbeatTTLSeconds: Int
        /// 404/410 answers in a row, across the deployment, before `verifyReceipt` counts as gone
        /// (`VERIFY_RECEIPT_GONE_AFTER`).
        public var verifyReceiptGoneAfter: Int
        /// The most of `WORKER_CONCURRENCY` bulk imports' validations may hold, in percent
        /// (`IMPORT_SHARE_PERCENT`, 25); they get it only when the live queues leave slots free.
        public var importSharePercent: Int
        /// Validations per second each app's bulk imports may start across the deployment
        /// (`IMPORT_RATE_PER_SECOND`, 50; 0: no budget of their own), apart from live traffic's: one
        /// call to Apple each, two for a sandbox receipt (production answers 21007 first).
        public var importRatePerSecond: Double
        /// Whether each batch adds what it changed to the revenue figures (`REVENUE_ROLLUP`, on by
        /// default; off leaves `revenue_daily` behind, for a bench measuring its cost).
        public var revenueRollup: Bool
        /// Backoff and give-up rules (`RETRY_BASE_MS`, `RETRY_MAX_BACKOFF_SECONDS`,
        /// `RETRY_MAX_AGE_HOURS`, `RETRY_21002_MAX_ATTEMPTS`).
        public var retryPolicy: RetryPolicy
        /// When the shared Apple outage circuit opens and how long it stays open (`CIRCUIT_*`).
        public var circuitPolicy: CircuitPolicy

        init(_ environment: EnvironmentReader) throws {
            concurrency = try environment.int("WORKER_CONCURRENCY", 16, range: 1...4096)
            shutdownTimeout = .seconds(try environment.int("WORKER_SHUTDOWN_TIMEOUT_SECONDS", 25, range: 0...3600))
            committers = try environment.int("WORKER_COMMITTERS", 2, range: 1...64)
            commitLinger = .milliseconds(try environment.int("WORKER_COMMIT_LINGER_MS", 20, range: 0...1000))
            idleWait = .milliseconds(try environment.int("WORKER_IDLE_WAIT_MS", 100, range: 10...5000))
            heartbeatTTLSeconds = try environment.int("WORKER_HEARTBEAT_TTL_SECONDS", 30, range: 2...3600)
            verifyReceiptGoneAfter = try environment.int("VERIFY_RECEIPT_GONE_AFTER", 20, range: 1...1_000_000)
            importSharePercent = try environment.int("IMPORT_SHARE_PERCENT", 25, range: 0...100)
            importRatePerSecond = Double(try environment.int("IMPORT_RATE_PER_SECOND", 50, range: 0...100_000))
            revenueRollup = try environment.bool("REVENUE_ROLLUP", true)
            retryPolicy = RetryPolicy(
                base: .milliseconds(try environment.int("RETRY_BASE_MS", 2000, range: 1...3_600_000)),
                cap: .seconds(try environment.int("RETRY_MAX_BACKOFF_SECONDS", 3600, range: 1...86_400)),
                maxAge: .seconds(try environment.int("RETRY_MAX_AGE_HOURS", 72, range: 1...8760) * 3600),
                malformedAttempts: try environment.int("RETRY_21002_MAX_ATTEMPTS", 5, range: 1...1000))
            circuitPolicy = try Self.circuitPolicy(environment)
        }

        static func circuitPolicy(_ environment: EnvironmentReader) throws -> CircuitPolicy {
            let openSeconds = try environment.int("CIRCUIT_OPEN_SECONDS", 10, range: 1...86_400)
            let maximumOpenSeconds = try environment.int("CIRCUIT_MAX_OPEN_SECONDS", 300, range: 1...86_400)
            guard maximumOpenSeconds >= openSeconds else {
                // CircuitPolicy would quietly raise it to the first open period; say so instead.
                throw ConfigurationError(variable: "CIRCUIT_MAX_OPEN_SECONDS", reason: "must be at least CIRCUIT_OPEN_SECONDS")
            }
            return CircuitPolicy(
                // At most 300 one-second buckets: CircuitPolicy would cut a longer window silently.
                window: .seconds(try environment.int("CIRCUIT_WINDOW_SECONDS", 30, range: 1...300)),
                minimumFailures: try environment.int("CIRCUIT_MIN_FAILURES", 20, range: 1...1_000_000),
                failureRatio: try environment.double("CIRCUIT_FAILURE_RATIO", 0.8, range: 0...1),
                openDuration: .seconds(openSeconds), maximumOpenDuration: .seconds(maximumOpenSeconds),
                probeLease: .seconds(try environment.int("CIRCUIT_PROBE_LEASE_SECONDS", 30, range: 1...3600)))
        }
    }

    /// The `schedule` role: subscription re-polls and the notification history sweep.
    public struct Scheduler: Sendable {
        /// When subscriptions are polled again (`REPOLL_LEAD_*`, `REPOLL_JITTER`,
        /// `REPOLL_TROUBLE_INTERVAL_SECONDS`); the worker plans each next poll with it.
        public var repollPolicy: RepollPolicy
        /// Which due re-polls Server Notifications V2 make unnecessary
        /// (`REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS`, default 21600, 0 turns it off;
        /// `REPOLL_SAFETY_NET_GRACE_SECONDS`, default 86400).
        public var repollSafetyNet: RepollSafetyNet
        /// Re-polls per second across every scheduler replica (`REPOLL_RATE_PER_SECOND`).
        public var repollRatePerSecond: Double
        /// Subscriptions per scheduler claim (`REPOLL_BATCH_SIZE`).
        public var repollBatchSize: Int
        /// How often the scheduler promotes due retries and claims due re-polls (`SCHEDULER_TICK_MS`,
        /// default 1000): how long a job whose retry came due, or a subscription whose poll came
        /// due, waits at most to be queued. The conformance suite's deployment ticks every 20 ms, so
        /// that after each jump of its clock the due re-polls are queued at once.
        public var tickInterval: Duration
        /// How often the scheduler recovers missed notifications from Apple's Get Notification History
        /// (`NOTIFICATION_HISTORY_INTERVAL_SECONDS`, default 900; it also sweeps on start).
        public var notificationHistoryInterval: Duration

        init(_ environment: EnvironmentReader) throws {
            repollPolicy = RepollPolicy(
                leadFraction: try environment.double("REPOLL_LEAD_FRACTION", 0.05, range: 0...0.5),
                maxLead: .seconds(try environment.int("REPOLL_MAX_LEAD_SECONDS", 86_400, range: 1...(30 * 86_400))),
                troubleInterval: .seconds(try environment.int("REPOLL_TROUBLE_INTERVAL_SECONDS", 86_400, range: 60...(30 * 86_400))),
                jitter: try environment.double("REPOLL_JITTER", 0.25, range: 0...1))
            repollSafetyNet = RepollSafetyNet(
                freshWindow: .seconds(try environment.int("REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS", 21_600, range: 0...(30 * 86_400))),
                grace: .seconds(try environment.int("REPOLL_SAFETY_NET_GRACE_SECONDS", 86_400, range: 0...(30 * 86_400))))
            repollRatePerSecond = try environment.double("REPOLL_RATE_PER_SECOND", 50, range: 0.01...100_000)
            repollBatchSize = try environment.int("REPOLL_BATCH_SIZE", 500, range: 1...10_000)
            // At least 10 ms: each tick is a Redis script and a Postgres claim.
            tickInterval = .milliseconds(try environment.int("SCHEDULER_TICK_MS", 1_000, range: 10...60_000))
            notificationHistoryInterval = .seconds(try environment.int("NOTIFICATION_HISTORY_INTERVAL_SECONDS", 900, range: 10...86_400))
        }
    }

    /// Webhook deliveries: how they are sent and when a lost one is queued again.
    public struct Webhooks: Sendable {
        /// How webhooks are delivered (`WEBHOOK_TIMEOUT_SECONDS`, default 10; `WEBHOOK_CA_FILE` to
        /// trust a private CA's receivers).
        public var client: WebhookClient.Configuration
        /// How long a webhook delivery stays queued before the dispatcher looks for its job in Redis
        /// and queues it again if Redis lost it (`WEBHOOK_REQUEUE_AFTER_SECONDS`, default 600).
        public var requeueAfter: Duration

        init(_ environment: EnvironmentReader) throws {
            client = WebhookClient.Configuration(
                timeout: .seconds(try environment.int("WEBHOOK_TIMEOUT_SECONDS", 10, range: 1...120)), caInfo: environment["WEBHOOK_CA_FILE"])
            // At most a day: the markers the check keeps alive last four.
            requeueAfter = .seconds(try environment.int("WEBHOOK_REQUEUE_AFTER_SECONDS", 600, range: 1...86_400))
        }
    }

    /// The dashboard and the admin API: the built-in admin and the session cookies.
    public struct Dashboard: Sendable {
        /// Who may use the dashboard and the admin API (`DASHBOARD_USERNAME`, `DASHBOARD_PASSWORD`; no
        /// default password in production).
        public var admin: AdminCredentials
        /// The dashboard's session cookies (`DASHBOARD_SESSION_SECRET`, shared by API replicas;
        /// `DASHBOARD_SESSION_HOURS`; `DASHBOARD_COOKIE_SECURE`, on by default in production).
        public var sessions: AdminSessions

        init(_ environment: EnvironmentReader, production: Bool) throws {
            let password = environment["DASHBOARD_PASSWORD"]
            if production {
                guard let password, password.count >= 12 else {
                    throw ConfigurationError(variable: "DASHBOARD_PASSWORD", reason: "must be set in production (at least 12 characters)")
                }
            }
            // Development only: a documented local default, refused in production above.
            admin = AdminCredentials(username: environment.string("DASHBOARD_USERNAME", "admin"), password: password ?? "receiptq-dev")
            // Without a shared secret each API process signs with its own random key: a session then
            // holds only on the replica that issued it (and ends when that process restarts).
            let secret = try environment.secret("DASHBOARD_SESSION_SECRET", minimumLength: 32)
            let secureCookies = try environment.bool("DASHBOARD_COOKIE_SECURE", production)
            sessions = AdminSessions(
                credentials: admin, secret: secret.map { Array($0.utf8) },
                lifetime: .seconds(try environment.int("DASHBOARD_SESSION_HOURS", 8, range: 1...168) * 3600), secureCookies: secureCookies)
        }
    }

    /// What every role reports: its metrics listener and its logs.
    public struct Telemetry: Sendable {
        /// The port of the metrics listener (`METRICS_PORT`; nil: none). serve also answers
        /// `/metrics` on its API port.
        public var metricsPort: Int?
        /// The least severe log level written (`LOG_LEVEL`: `trace` … `critical`, default `info`).
        public var logLevel: Logger.Level
        /// How log lines are written (`LOG_FORMAT`: `text`, the default, or `json`).
        public var logFormat: LogFormat

        init(_ environment: EnvironmentReader) throws {
            metricsPort = environment.isSet("METRICS_PORT") ? try environment.int("METRICS_PORT", 0, range: 0...65535) : nil
            logLevel = try environment.choice("LOG_LEVEL", Logger.Level.info)
            logFormat = try environment.choice("LOG_FORMAT", LogFormat.text)
        }
    }
}
