import AppStoreClient
import Curl
import Dashboard
import Foundation
import HTTPServerGuard
import Hiredis
import Hummingbird
import IngestAPI
import Libpq
import Logging
import Metrics
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptScheduler
import ReceiptSignature
import ReceiptWorker
import RedisJobQueue
import ServiceLifecycle
import Telemetry
import UnixSignals
import WebhookClient

/// The composition root: builds each role from an ``AppConfiguration``. The CLI and the
/// end-to-end tests both call these, so what is tested is what runs.
public enum ReceiptQueueApp {
    /// Applies pending database migrations.
    /// - Parameter logger: the connection's (default: the task-local `Logger.current`).
    /// - Returns: the names of the migrations applied.
    @discardableResult
    public static func migrate(_ configuration: AppConfiguration, logger: Logger = Logger.current) throws -> [String] {
        try Migrator.migrate(configuration.postgres, label: "migrate", logger: logger)
    }

    /// The ingestion API as a Hummingbird application.
    /// - Parameters:
    ///   - metrics: the process's registry: the API's requests are counted in it, and `GET /metrics`
    ///     renders it.
    ///   - onRunning: called with the bound port once the server listens (port 0 picks a free one).
    /// - Throws: `ConfigurationError` when no trusted certificates are configured: without them
    ///   every receipt would be refused as forged.
    public static func makeAPI(
        _ configuration: AppConfiguration, metrics: PrometheusExporter = PrometheusExporter(), logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let (router, intake, pools) = try makeRouter(configuration, metrics: metrics, logger: logger, now: now)
        // The intake runs in the application's service group: its result listener starts there and
        // stops after the server has stopped taking requests. The pools, listed first, are closed
        // last (a group stops its services in reverse order; Hummingbird adds the server last).
        // Every connection is held to the configured timeouts and cap, so a slow or silent client
        // cannot keep a file descriptor for long; the soft open-file limit is raised to hold the cap.
        raiseOpenFileLimit(to: configuration.api.connections.maxConnections + 256, logger: logger)
        var application = Application(
            router: router, server: GuardedHTTPServer.http1(configuration.api.connections, listener: .api, metrics: metrics, logger: logger),
            configuration: .init(address: .hostname(configuration.api.host, port: configuration.api.port), serverName: "receiptq"),
            services: [pools, intake],
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) }, logger: logger)
        // The first requests should be able to wait for their answers too.
        application.beforeServerStarts { await intake.waitUntilListening(within: .seconds(1)) }
        return application
    }

    /// The API's routes, as ``makeAPI(_:metrics:logger:now:onRunning:)`` serves them (the OpenAPI test walks
    /// them to compare with the document), the intake, a service the caller runs (or shuts down,
    /// unrun), and the routes' connection pools, a service that closes them at graceful shutdown.
    /// Connections are made on first use, not here.
    /// - Throws: `ConfigurationError` when no trusted certificates are configured.
    ///
    /// `now` is the client API's clock (what its answers are as of; the conformance suite's
    /// simulated time), the machine's by default.
    public static func makeRouter(
        _ configuration: AppConfiguration, metrics: PrometheusExporter = PrometheusExporter(), logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws -> (router: Router<IngestRequestContext>, intake: RedisIntake, pools: ClosedAtShutdown) {
        let roots = try trustStore(configuration)
        let verifier = ReceiptSignatureVerifier(trustStore: roots)
        let redisPool = RedisConnectionPool(configuration: configuration.intakeRedis, size: 32, logger: logger)
        let postgresPool = PostgresConnectionPool(configuration: configuration.postgres, size: 8, logger: logger)
        let intake = RedisIntake(
            configuration: configuration.intakeRedis, pool: redisPool, keys: configuration.keys,
            idempotencyWindow: configuration.api.idempotencyWindow, replication: replicaAcknowledgement(configuration, metrics: metrics),
            logger: logger)
        let catalog = PostgresCatalog(pool: postgresPool)
        // One gate for every door: failures counted in Redis, shared by every replica.
        let gate = AuthGate(
            throttle: RedisGuessingThrottle(pool: redisPool, keys: configuration.keys, policy: configuration.api.guessing),
            policy: configuration.api.guessing, log: SecurityLog(logger: logger, metrics: metrics))
        let api = IngestAPI(
            intake: intake, catalog: catalog, authenticity: verifier, signedPayloads: jwsVerifier(configuration, roots: roots, metrics: metrics),
            subscriptions: catalog, events: PostgresEventCatalog(pool: postgresPool), appTransactions: catalog,
            customers: PostgresEntitlements(pool: postgresPool), identity: PostgresIdentity(pool: postgresPool),
            consumption: PostgresCustomerConsumption(pool: postgresPool), gate: gate,
            configuration: configuration.api.ingest, metrics: metrics, now: now)
        let router = Router(context: IngestRequestContext.self)
        // First, so that it also times the requests the other middleware refuses.
        router.add(middleware: HTTPMetricsMiddleware(factory: metrics))
        // Before every route: nothing reaches a handler that Postgres could not store.
        router.add(
            middleware: InputHygieneMiddleware(
                maxBodyBytes: max(configuration.api.ingest.maxBodyBytes, AdminPages.maxFormBytes),
                queryParameters: IngestAPI.queryParameters.merging(AdminAPI.queryParameters) { $1 }.merging(["GET /metrics": []]) { $1 }
            ) { request, status, errors in
                if request.uri.path == SoftphoneService.path { return SoftphoneService.refusal(request, status: status, errors: errors) }
                if AdminPages.isPage(request.uri.path) { return AdminPages.refusal(status: status, errors: errors) }
                return IngestAPI.refusal(request, status: status, errors: errors)
            })
        api.addRoutes(to: router)
        SoftphoneService(api: api, configuration: configuration.api.softphone).addRoutes(to: router)
        let dead = RedisJobSet.dead(pool: redisPool, keys: configuration.keys)
        let retries = RedisJobSet.retries(pool: redisPool, keys: configuration.keys)
        let overview = RedisQueueOverview(pool: redisPool, keys: configuration.keys)
        let revenue = PostgresRevenueFigures(pool: postgresPool)
        MetricsEndpoint(
            exporter: metrics, gauges: queueGauges(configuration, metrics: metrics, logger: logger),
            revenue: RevenueGauges(figures: revenue, factory: metrics, logger: logger)
        ).addRoutes(to: router)
        let operators = PostgresOperators(pool: postgresPool)
        let authenticator = OperatorAuthenticator(
            builtIn: configuration.dashboard.admin, directory: operators, gate: gate, proxies: configuration.api.ingest.proxies)
        let webhookClient = configuration.webhooks.client
        let webhooks = PostgresWebhookAdministration(
            pool: postgresPool, secrets: try configuration.secretsKey.map { try SecretBox(key: $0) },
            resolvesOnlyPrivately: PublicAddressPolicy.resolvesOnlyPrivately,
            sendTest: { try await WebhookClient.sendTest(to: $0, origin: "the receiptq dashboard", configuration: webhookClient) })
        // Its HTTP client needs no thread of its own; its few connections close with the process.
        let support = try makeSupportDesk(
            configuration, pool: postgresPool, intake: intake, maximumWait: 2, origin: .dashboard, metrics: metrics, logger: logger)?.desk
        let resync = QueuedResync(intake: intake, app: { id in try await catalog.apps().first { $0.id == id } })
        let entitlements = PostgresEntitlements(pool: postgresPool)
        let eraser = CustomerEraser(
            database: PostgresCustomerErasure(pool: postgresPool), jobs: RedisCustomerJobPurge(pool: redisPool, keys: configuration.keys))
        AdminAPI(
            dead: dead, retries: retries, overview: overview, authenticator: authenticator, audit: operators, webhooks: webhooks, support: support,
            resync: resync, entitlements: entitlements, transferRules: PostgresIdentity(pool: postgresPool),
            consumptionPolicies: PostgresCustomerConsumption(pool: postgresPool),
            customerData: PostgresCustomerExport { [postgres = configuration.postgres] in
                try PostgresConnection(configuration: postgres, label: "customer-export")
            }, eraser: eraser, revenue: revenue
        ).addRoutes(to: router)
        try AdminPages(
            dead: dead, retries: retries, overview: overview, authenticator: authenticator, sessions: configuration.dashboard.sessions,
            audit: operators, webhooks: webhooks, apps: { try await catalog.apps() },
            notifications: PostgresNotificationLog(pool: postgresPool), customers: PostgresCustomerDirectory(pool: postgresPool),
            appleCalls: RedisAppleCallLedger(pool: redisPool, keys: configuration.keys), support: support, resync: resync,
            entitlements: entitlements, eraser: eraser, customerEntitlements: entitlements, revenue: revenue
        ).addRoutes(to: router)
        // Last, with the finished route table: it joins only the not-found chain (see its doc).
        router.add(middleware: MethodNotAllowedMiddleware(routes: router.routes.map { ($0.method.rawValue, $0.path.description) }))
        return (
            router, intake,
            ClosedAtShutdown {
                redisPool.close()
                postgresPool.close()
            }
        )
    }

    /// The certificates receipt signatures must chain to.
    static func trustStore(_ configuration: AppConfiguration) throws -> TrustStore {
        guard let directory = configuration.trustRootsDirectory else {
            throw ConfigurationError(
                variable: "RECEIPTQ_TRUST_ROOTS_DIR",
                reason: "must name a directory of trusted certificates (Apple Root CA, Apple Root CA - G3, intermediates)")
        }
        let store: TrustStore
        do {
            store = try TrustStore.load(directory: URL(fileURLWithPath: directory))
        } catch {
            throw ConfigurationError(variable: "RECEIPTQ_TRUST_ROOTS_DIR", reason: "cannot be read as PEM certificates (\(error))")
        }
        guard !store.roots.isEmpty || !store.storeKitTestCertificates.isEmpty else {
            throw ConfigurationError(variable: "RECEIPTQ_TRUST_ROOTS_DIR", reason: "holds no self-signed root certificate")
        }
        return store
    }

    /// `REDIS_MIN_REPLICAS_ACK` for an enqueue a lost write would lose (the API's and the
    /// notification sweep's intakes, the re-poll and webhook enqueues), its timeouts counted in
    /// `receiptq_redis_replication_timeouts_total`.
    static func replicaAcknowledgement(_ configuration: AppConfiguration, metrics: any MetricsFactory) -> ReplicaAcknowledgement {
        let timeouts = Counter(label: "receiptq_redis_replication_timeouts_total", factory: metrics)
        return ReplicaAcknowledgement(
            replicas: configuration.replicas.minimum, timeout: configuration.replicas.timeout, onTimeout: { timeouts.increment() })
    }

    /// The worker role: `WORKER_CONCURRENCY` validations in flight on a few threads (a fetcher, two
    /// committers with their own Redis and Postgres connections, and one libcurl engine thread per
    /// HTTP client: verifyReceipt, the App Store Server API, webhooks).
    ///
    /// A service group of its own, the HTTP clients first and the worker last: services start in
    /// order and stop in reverse, so on graceful shutdown the worker finishes the jobs in hand
    /// before the clients' threads end and their connections close. Nothing starts until it runs.
    /// - Parameter metrics: the process's registry (jobs settled, Apple's calls, latencies).
    /// - Throws: `ConfigurationError` for a secrets key that cannot open the apps' sealed keys.
    ///
    /// `observedAt` dates what Apple's Server API answers (the subscription states it stores are
    /// "as observed then"): the conformance suite's simulated time, the machine's by default. The
    /// worker's own timing (retries, heartbeats, budgets) stays on the machine's clock, which its
    /// Redis queue shares.
    ///
    /// `repollClock` is the clock subscriptions' next polls are planned on (``JobPlanner/observedAt``),
    /// which must be the scheduler's re-poll clock: nil, the machine's (production, `receiptq all`,
    /// the tests' whole system); the conformance suite's deployment gives its simulated clock.
    public static func makeWorker(
        _ configuration: AppConfiguration, metrics: PrometheusExporter = PrometheusExporter(), logger: Logger,
        observedAt: @escaping @Sendable () -> Date = { Date() }, repollClock: (@Sendable () -> Date)? = nil
    ) throws -> ServiceGroup {
        let host = ProcessInfo.processInfo.hostName
        let pid = ProcessInfo.processInfo.processIdentifier
        let instance = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let workerID = "\(host)-\(pid)-\(instance)"
        var appStore = configuration.apple.verifyReceipt
        appStore.maxConcurrent = configuration.worker.concurrency
        // Every call in flight holds a socket; many systems start processes with a soft limit of 1,024.
        raiseOpenFileLimit(to: configuration.worker.concurrency + 256, logger: logger)
        let secrets = try configuration.secretsKey.map { try SecretBox(key: $0) }
        let serverAPI = makeServerAPIClient(configuration, meter: AppleCallMeter(factory: metrics), logger: logger, observedAt: observedAt)
        let consumption = try makeConsumptionSender(configuration, meter: AppleCallMeter(factory: metrics), logger: logger)
        let verifyReceipt = AppStoreClient(configuration: appStore)
        let webhooks = WebhookClient(
            configuration: .init(
                timeout: configuration.webhooks.client.timeout, maxConcurrent: configuration.worker.concurrency,
                caInfo: configuration.webhooks.client.caInfo))
        let worker = WorkerEngine(
            configuration: .init(
                concurrency: configuration.worker.concurrency, committers: configuration.worker.committers,
                commitLinger: configuration.worker.commitLinger, reserveTimeout: configuration.worker.idleWait,
                shutdownTimeout: configuration.worker.shutdownTimeout,
                heartbeatInterval: .seconds(max(1, configuration.worker.heartbeatTTLSeconds / 3)),
                retryPolicy: configuration.worker.retryPolicy, repollPolicy: configuration.scheduler.repollPolicy,
                verifyReceiptGoneAfter: configuration.worker.verifyReceiptGoneAfter,
                importShare: Double(configuration.worker.importSharePercent) / 100,
                importRatePerSecond: configuration.worker.importRatePerSecond),
            makeQueue: { role in
                let queue = RedisWorkQueue(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-\(role)", logger: logger),
                    keys: configuration.keys,
                    workerID: workerID, retention: configuration.retention.deadLetters)
                queue.heartbeatTTLSeconds = configuration.worker.heartbeatTTLSeconds
                return queue
            },
            makeStore: { role in
                PostgresReceiptStore(
                    connection: try PostgresConnection(configuration: configuration.postgres, label: "worker-\(role)", logger: logger),
                    secrets: secrets, rollsUpRevenue: configuration.worker.revenueRollup)
            },
            makeCircuit: {
                RedisOutageCircuit(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-circuit", logger: logger),
                    keys: configuration.keys,
                    policy: configuration.worker.circuitPolicy)
            },
            makeWatch: {
                RedisVerifyReceiptWatch(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-lifecycle", logger: logger),
                    keys: configuration.keys)
            },
            makeImportBudget: {
                RedisServerAPIRateLimiter(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-import-budget", logger: logger),
                    keys: configuration.keys)
            },
            verifier: AppleValidation(verifyReceipt: verifyReceipt, serverAPI: serverAPI), webhooks: webhooks, consumption: consumption,
            requeueAbandoned: {
                do {
                    let redis = try RedisConnection(configuration: configuration.redis, label: "worker-shutdown", logger: logger)
                    defer { redis.close() }
                    try RedisMaintenance(connection: redis, keys: configuration.keys).requeueInFlight(worker: workerID)
                } catch {
                    // The heartbeat lapses soon and the janitor takes the jobs back: late, not lost.
                    logger.error("Could not requeue the jobs in hand at shutdown", error: error)
                }
            }, observedAt: repollClock, metrics: metrics, logger: logger)
        let clients: [(any Service)?] = [verifyReceipt, serverAPI, webhooks, consumption]
        return ServiceGroup(services: clients.compactMap { $0 } + [worker], logger: logger)
    }

    /// Raises the soft open-file limit towards `wanted` (never above the hard limit), and says so
    /// when the hard limit is too low for the configured concurrency.
    static func raiseOpenFileLimit(to wanted: Int, logger: Logger) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(wanted) else { return }
        limit.rlim_cur = min(rlim_t(wanted), limit.rlim_max)
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < rlim_t(wanted) {
            logger.warning(
                "The open-file limit is below what WORKER_CONCURRENCY needs; calls beyond it fail as transport errors",
                metadata: ["open_files.limit": "\(limit.rlim_cur)", "open_files.wanted": "\(wanted)"])
        }
    }

    /// The scheduler: retry promotion, the janitor, and subscription re-polls.
    /// - Parameters:
    ///   - onlyApps: re-poll only these apps' subscriptions (nil: all); tests sharing a database
    ///     keep to their own app with it.
    ///   - now: the injected clock (tests move it forward to make re-polls due): retry promotion,
    ///     the janitor, and the re-poll claims unless `repollClock` is given.
    ///   - repollClock: the re-poll claims' own clock, the one the worker plans polls on
    ///     (``Scheduler``'s `repollNow`; nil: `now`). The conformance suite's simulated clock.
    ///   - metrics: the process's registry (re-polls queued and due).
    public static func makeScheduler(
        _ configuration: AppConfiguration, onlyApps: [UUID]? = nil, now: @escaping @Sendable () -> Date = { Date() },
        repollClock: (@Sendable () -> Date)? = nil, metrics: PrometheusExporter = PrometheusExporter(), logger: Logger
    ) -> Scheduler {
        Scheduler(
            configuration: .init(
                tickInterval: configuration.scheduler.tickInterval,
                janitorInterval: .seconds(max(1, configuration.worker.heartbeatTTLSeconds / 2)),
                repollBatch: configuration.scheduler.repollBatchSize,
                // Past the retry budget: a re-poll still retrying is not queued a second time.
                repollLease: configuration.worker.retryPolicy.maxAge + .seconds(3600),
                safetyNet: configuration.scheduler.repollSafetyNet),
            makeMaintenance: {
                RedisMaintenance(
                    connection: try RedisConnection(configuration: configuration.redis, label: "scheduler", logger: logger),
                    keys: configuration.keys)
            },
            makeRepolls: {
                let schedule = PostgresSubscriptionSchedule(
                    connection: try PostgresConnection(configuration: configuration.postgres, label: "scheduler", logger: logger), apps: onlyApps)
                let queue = RedisRepollQueue(
                    connection: try RedisConnection(configuration: configuration.redis, label: "scheduler-repoll", logger: logger),
                    keys: configuration.keys, ratePerSecond: configuration.scheduler.repollRatePerSecond,
                    replication: replicaAcknowledgement(configuration, metrics: metrics))
                return (schedule, queue)
            }, now: now, repollNow: repollClock, metrics: metrics, logger: logger)
    }

    /// The retention step (schedule role): drops what `RETENTION_*` no longer keeps.
    /// - Parameters:
    ///   - onlyApps: only these apps' rows (nil: all); tests sharing a database keep to their own.
    ///   - now: the injected clock.
    public static func makeRetentionSweep(
        _ configuration: AppConfiguration, onlyApps: [UUID]? = nil, now: @escaping @Sendable () -> Date = { Date() },
        metrics: PrometheusExporter = PrometheusExporter(), logger: Logger
    ) -> RetentionSweep {
        let retention = configuration.retention
        return RetentionSweep(
            configuration: .init(
                policy: retention.policy, interval: retention.interval, batchSize: retention.batchSize, batchPause: retention.batchPause),
            make: {
                let rows = PostgresExpiredRows(
                    connection: try PostgresConnection(configuration: configuration.postgres, label: "retention", logger: logger),
                    apps: onlyApps)
                let deadLetters = RedisDeadLetterTrim(
                    connection: try RedisConnection(configuration: configuration.redis, label: "retention", logger: logger),
                    keys: configuration.keys)
                return (rows, deadLetters)
            }, now: now, metrics: metrics, logger: logger)
    }

    /// The revenue folding (schedule role): past days' rollup shards folded into one row each.
    /// - Parameters:
    ///   - onlyApps: only these apps' rows (nil: all); tests sharing a database keep to their own.
    ///   - now: the injected clock.
    public static func makeRevenueFolding(
        _ configuration: AppConfiguration, onlyApps: [UUID]? = nil, now: @escaping @Sendable () -> Date = { Date() }, logger: Logger
    ) -> RevenueFolding {
        RevenueFolding(
            make: {
                PostgresRevenueFolding(
                    connection: try PostgresConnection(configuration: configuration.postgres, label: "revenue", logger: logger), apps: onlyApps)
            },
            now: now, logger: logger)
    }

    /// The webhook dispatcher (schedule role): queues each event's deliveries once they may go.
    /// - Parameter onlyApps: only these apps' deliveries (nil: all); tests sharing a database keep
    ///   to their own app with it.
    public static func makeWebhookDispatcher(
        _ configuration: AppConfiguration, onlyApps: [UUID]? = nil, metrics: PrometheusExporter = PrometheusExporter(), logger: Logger
    ) -> WebhookDispatcher {
        WebhookDispatcher(
            configuration: WebhookDispatcher.Configuration(requeueAfter: configuration.webhooks.requeueAfter),
            make: {
                let outbox = PostgresWebhookOutbox(
                    connection: try PostgresConnection(configuration: configuration.postgres, label: "webhook-dispatcher", logger: logger),
                    apps: onlyApps)
                let queue = RedisWebhookQueue(
                    connection: try RedisConnection(configuration: configuration.redis, label: "webhook-dispatcher", logger: logger),
                    keys: configuration.keys, replication: replicaAcknowledgement(configuration, metrics: metrics))
                return (outbox, queue)
            }, metrics: metrics, logger: logger)
    }

    /// The metrics listener on `METRICS_PORT` (nil when it is not set): `GET /metrics` with the
    /// queue gauges read from Redis at each scrape, on `HTTP_HOST`, its connections held to the
    /// API's `HTTP_*` timeouts and cap. work and schedule have no other
    /// listener; serve has `/metrics` on its API port as well.
    /// - Parameter onRunning: called with the bound port once it listens.
    public static func makeMetricsServer(
        _ configuration: AppConfiguration, metrics: PrometheusExporter, logger: Logger,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> (any Service)? {
        guard let port = configuration.telemetry.metricsPort else { return nil }
        let endpoint = MetricsEndpoint(exporter: metrics, gauges: queueGauges(configuration, metrics: metrics, logger: logger))
        return Application(
            router: endpoint.listenerRouter(),
            server: GuardedHTTPServer.http1(configuration.api.connections, listener: .metrics, metrics: metrics, logger: logger),
            configuration: .init(address: .hostname(configuration.api.host, port: port), serverName: "receiptq-metrics"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) }, logger: logger)
    }

    /// The queue gauges a scrape reads from Redis, on a connection of their own with short
    /// timeouts: a hung Redis must cost a scrape a couple of seconds, not Prometheus's whole scrape
    /// timeout (which would drop the process's own counters with it), and must not hold one of the
    /// API's connections.
    static func queueGauges(_ configuration: AppConfiguration, metrics: PrometheusExporter, logger: Logger) -> QueueGauges {
        var redis = configuration.redis
        redis.connectTimeout = min(redis.connectTimeout, .seconds(1))
        redis.commandTimeout = .seconds(2)
        // One connection: a scrape reads the queues in at most two round trips.
        let pool = RedisConnectionPool(configuration: redis, size: 1)
        return QueueGauges(
            overview: RedisQueueOverview(pool: pool, keys: configuration.keys, activityMinutes: 0), factory: metrics, logger: logger)
    }

    /// Runs services until SIGTERM/SIGINT, then shuts them down gracefully in reverse order.
    public static func run(_ services: [any Service], logger: Logger) async throws {
        let group = ServiceGroup(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
