import AppStoreClient
import Foundation
import Hiredis
import Hummingbird
import IngestAPI
import Libpq
import Logging
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptScheduler
import ReceiptWorker
import RedisJobQueue
import ServiceLifecycle
import UnixSignals

/// The composition root: builds each role from an ``AppConfiguration``. The CLI and the
/// end-to-end tests both call these, so what is tested is what runs.
public enum ReceiptQueueApp {
    /// Applies pending database migrations.
    /// - Returns: the names of the migrations applied.
    @discardableResult
    public static func migrate(_ configuration: AppConfiguration) throws -> [String] {
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "migrate")
        defer { connection.close() }
        return try Migrator.migrate(connection)
    }

    /// The ingestion API as a Hummingbird application.
    /// - Parameters:
    ///   - onRunning: called with the bound port once the server listens (port 0 picks a free one).
    public static func makeAPI(
        _ configuration: AppConfiguration, logger: Logger, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        Application(
            router: makeRouter(configuration),
            configuration: .init(address: .hostname(configuration.httpHost, port: configuration.httpPort), serverName: "receiptq"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) }, logger: logger)
    }

    /// The API's routes, as ``makeAPI(_:logger:onRunning:)`` serves them; the OpenAPI test walks
    /// them to compare with the document. Connections are made on first use, not here.
    public static func makeRouter(_ configuration: AppConfiguration) -> Router<IngestRequestContext> {
        let redisPool = RedisConnectionPool(configuration: configuration.redis, size: 32)
        let postgresPool = PostgresConnectionPool(configuration: configuration.postgres, size: 8)
        let api = IngestAPI(
            intake: RedisIntake(pool: redisPool, keys: configuration.keys),
            catalog: PostgresCatalog(pool: postgresPool), configuration: configuration.api)
        let router = Router(context: IngestRequestContext.self)
        api.addRoutes(to: router)
        return router
    }

    /// The worker: `WORKER_CONCURRENCY` validations in flight on a few threads (a fetcher, two
    /// committers with their own Redis and Postgres connections, one libcurl engine thread).
    /// - Throws: when libcurl cannot start its engine.
    public static func makeWorker(_ configuration: AppConfiguration, logger: Logger) throws -> WorkerEngine {
        let host = ProcessInfo.processInfo.hostName
        let pid = ProcessInfo.processInfo.processIdentifier
        let instance = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let workerID = "\(host)-\(pid)-\(instance)"
        var appStore = configuration.appStore
        appStore.maxConcurrent = configuration.workerConcurrency
        // Every call in flight holds a socket; many systems start processes with a soft limit of 1,024.
        raiseOpenFileLimit(to: configuration.workerConcurrency + 256, logger: logger)
        return WorkerEngine(
            configuration: .init(
                concurrency: configuration.workerConcurrency, shutdownTimeout: configuration.workerShutdownTimeout,
                heartbeatInterval: .seconds(max(1, configuration.workerHeartbeatTTLSeconds / 3)),
                retryPolicy: configuration.retryPolicy),
            makeQueue: { role in
                let queue = RedisWorkQueue(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-\(role)"), keys: configuration.keys,
                    workerID: workerID)
                queue.heartbeatTTLSeconds = configuration.workerHeartbeatTTLSeconds
                return queue
            },
            makeStore: { role in
                PostgresReceiptStore(connection: try PostgresConnection(configuration: configuration.postgres, label: "worker-\(role)"))
            },
            makeCircuit: {
                RedisOutageCircuit(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-circuit"), keys: configuration.keys,
                    policy: configuration.circuitPolicy)
            },
            verifier: try AppStoreClient(configuration: appStore),
            requeueAbandoned: {
                do {
                    let redis = try RedisConnection(configuration: configuration.redis, label: "worker-shutdown")
                    defer { redis.close() }
                    try RedisMaintenance(connection: redis, keys: configuration.keys).requeueInFlight(worker: workerID)
                } catch {
                    // The heartbeat lapses soon and the janitor takes the jobs back: late, not lost.
                    logger.error("Could not requeue the jobs in hand at shutdown", metadata: ["error": "\(error)"])
                }
            }, logger: logger)
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
                metadata: ["limit": "\(limit.rlim_cur)", "wanted": "\(wanted)"])
        }
    }

    /// The scheduler: retry promotion and the janitor.
    public static func makeScheduler(_ configuration: AppConfiguration, logger: Logger) -> Scheduler {
        Scheduler(
            configuration: .init(janitorInterval: .seconds(max(1, configuration.workerHeartbeatTTLSeconds / 2))),
            makeMaintenance: {
                RedisMaintenance(
                    connection: try RedisConnection(configuration: configuration.redis, label: "scheduler"),
                    keys: configuration.keys)
            }, logger: logger)
    }

    /// Runs services until SIGTERM/SIGINT, then shuts them down gracefully in reverse order.
    public static func run(_ services: [any Service], logger: Logger) async throws {
        let group = ServiceGroup(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
