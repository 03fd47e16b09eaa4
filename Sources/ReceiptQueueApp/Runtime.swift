import Foundation
import Hiredis
import Logging
import Metrics
import NIOCore
import NIOPosix
import ServiceLifecycle
import Telemetry

extension ReceiptQueueApp {
    /// One process of the `receiptq` executable: its configuration read and its logging set up,
    /// once. Each role runs from here, so the executable only parses arguments.
    public struct Runtime: Sendable {
        /// The configuration read from the environment; `all` adjusts it before the roles start.
        public var configuration: AppConfiguration
        /// The process's logger, `receiptq.<label>`.
        public let logger: Logger

        /// The process's metrics registry: every role records into it, `/metrics` renders it.
        static let metrics: PrometheusExporter = {
            let exporter = PrometheusExporter()
            MetricsSystem.bootstrap(exporter)
            return exporter
        }()

        /// Reads the configuration and sets up logging (`LOG_LEVEL`, `LOG_FORMAT`); once per process.
        /// - Parameter label: the role, which names the process's logger (`receiptq.serve`, …).
        /// - Throws: `ConfigurationError` naming a variable whose value is not valid.
        public static func bootstrap(label: String) throws -> Runtime {
            // libcurl runs with CURLOPT_NOSIGNAL and expects the application to ignore SIGPIPE; a peer
            // that resets a socket must cost one failed call, not the process.
            signal(SIGPIPE, SIG_IGN)
            let configuration = try AppConfiguration()
            let level = configuration.telemetry.logLevel
            LoggingSystem.bootstrap { label in
                var handler: any LogHandler =
                    switch configuration.telemetry.logFormat {
                    case .text: StreamLogHandler.standardError(label: label)
                    case .json: JSONLogHandler.standardError(label: label)
                    }
                handler.logLevel = level
                return handler
            }
            var logger = Logger(label: "receiptq.\(label)")
            logger.logLevel = level
            return Runtime(configuration: configuration, logger: logger)
        }

        /// Makes NIO's event loops Swift Concurrency's executor; call before the first task.
        ///
        /// A request handler otherwise resumes on the cooperative pool and hops back to an event loop
        /// to answer: two more thread switches a request on two cores. Measured with `scripts/bench
        /// ingest` (same build, alternating): context switches per request 2.2 → 1.2, server CPU per
        /// request −15 %. Safe because no request handler blocks inside a task: sockets and C calls hop
        /// to their own dispatch queues (`ConfinedQueue`), the worker and scheduler loops run on their
        /// own threads; what does block an event loop is brief and outside serving (the intake's wait
        /// of up to a second for its result channel at start-up, its listener's stop at shutdown).
        public static func installExecutor() {
            // Before the first task is enqueued: jobs already on the default pool would stay there.
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }

        /// `receiptq serve`: the ingestion API until SIGTERM.
        public func serve() async throws {
            let api = try makeAPI(configuration, metrics: Self.metrics, logger: logger)
            try await run([api])
        }

        /// `receiptq work`: the worker until SIGTERM.
        /// - Parameter concurrency: validations in flight (nil: `WORKER_CONCURRENCY`).
        public func work(concurrency: Int?) async throws {
            var configuration = configuration
            if let concurrency { configuration.worker.concurrency = concurrency }
            let worker = try makeWorker(configuration, metrics: Self.metrics, logger: logger)
            try await run([worker])
        }

        /// `receiptq schedule`: retry promotion, the janitor, re-polls, webhook dispatch, the
        /// notification history sweep, retention and the revenue folding, until SIGTERM.
        public func schedule() async throws {
            try await run(try scheduleServices())
        }

        /// The schedule role's services; the sweep only with trust roots and a secrets key.
        func scheduleServices() throws -> [any Service] {
            var services: [any Service] = [
                makeScheduler(configuration, metrics: Self.metrics, logger: logger),
                makeWebhookDispatcher(configuration, metrics: Self.metrics, logger: logger),
                makeRetentionSweep(configuration, metrics: Self.metrics, logger: logger),
                makeRevenueFolding(configuration, logger: logger),
            ]
            if let history = try makeNotificationSweep(configuration, metrics: Self.metrics, logger: logger) {
                services.append(history.service)
            } else {
                logger.info("Notification history is not swept: it needs RECEIPTQ_TRUST_ROOTS_DIR and RECEIPTQ_SECRETS_KEY")
            }
            return services
        }

        /// `receiptq migrate`: applies pending migrations.
        /// - Returns: the names of the migrations applied.
        public func migrate() throws -> [String] {
            try ReceiptQueueApp.migrate(configuration, logger: logger)
        }

        /// `receiptq all`: migrates, then runs every role in one process until SIGTERM.
        ///
        /// The dev tools (the mock App Store, the demo's backend) are not linked here: the
        /// executable passes them in, so no production library depends on them.
        /// - Parameters:
        ///   - first: services started before the roles (and stopped after them): the mock App Store.
        ///   - beforeAPI: makes the services started just before the API (the demo's backend), once
        ///     the roles are made.
        ///   - onAPIRunning: called with the API's port once it listens.
        public func all(
            first: [any Service], beforeAPI: () throws -> [any Service], onAPIRunning: @escaping @Sendable (Int) async -> Void
        ) async throws {
            let roles = try makeRoles(configuration, metrics: Self.metrics, logger: logger, onAPIRunning: onAPIRunning)
            try await run(first + roles.background + (try beforeAPI()) + [roles.api])
        }

        /// Applies pending migrations at the start of `all`, and says which.
        public func migrateAtStart() throws {
            let applied = try migrate()
            if !applied.isEmpty { logger.info("Migrations applied", metadata: ["migrations.applied": .array(applied.map { .string($0) })]) }
        }

        /// Runs `services` (with the metrics listener when `METRICS_PORT` is set) until SIGTERM/SIGINT.
        public func run(_ services: [any Service]) async throws {
            // Started first, so it stops last: a final scrape still sees the drain.
            let listener = makeMetricsServer(configuration, metrics: Self.metrics, logger: logger)
            // Started before the roles, so it stops after them: they may need a new primary to drain.
            let sentinels = RedisSentinelWatch(configuration: configuration.redis, logger: logger)
            try await ReceiptQueueApp.run([listener as (any Service)?, sentinels].compactMap { $0 } + services, logger: logger)
        }

        /// The administration of the configured database, on a connection of its own.
        /// - Parameter label: the connection's name (`apps`, `webhooks`, …).
        public func admin(label: String) throws -> Admin {
            try Admin(configuration, label: label, logger: logger)
        }
    }
}
