import Foundation
import Hiredis
import IngestAPI
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import RedisJobQueue

extension ReceiptQueueApp.Admin {
    /// Changes an app's call-budget settings (issue 42): the trust a door-verified JWS gets and
    /// its freshness window; nil leaves a setting as it is. Audited as the caller's `audit`.
    public func setJWSTrust(appID: UUID, trust: JWSTrustChoice?, freshness: TimeInterval?, audit: AuditAction) throws {
        let changes = [trust.map { "jws_trust \($0.rawValue)" }, freshness.map { "freshness \(Int($0))s" }].compactMap { $0 }
        try trail.run(audit.on(appID, changes.joined(separator: ", "))) {
            try apps.setJWSTrust(appID: appID, trust: trust, freshness: freshness)
        }
    }
}

extension ReceiptQueueApp {
    /// Queues a resync of a customer's history (the command line's door; the admin API's is
    /// `POST /admin/api/history/resync`): audited as `audit` before it is queued, then queued as a
    /// normal validation job on the one queue.
    /// - Returns: the queued job's id.
    /// - Throws: ``ResyncFailure``, or the database's error when the audit line cannot be written
    ///   (nothing was queued).
    public static func resync(
        _ request: ResyncRequest, configuration: AppConfiguration, audit: AuditAction, logger: Logger
    ) async throws -> UUID {
        let postgres = PostgresConnectionPool(configuration: configuration.postgres, size: 1, logger: logger)
        let redis = RedisConnectionPool(configuration: configuration.intakeRedis, size: 1, logger: logger)
        defer {
            redis.close()
            postgres.close()
        }
        let catalog = PostgresCatalog(pool: postgres)
        let intake = RedisIntake(
            configuration: configuration.intakeRedis, pool: redis, keys: configuration.keys, replication: nil, logger: logger)
        let resync = QueuedResync(intake: intake, app: { id in try await catalog.apps().first { $0.id == id } })
        let log = PostgresOperators(pool: postgres)
        let id = try await log.begin(audit.on(request.appID, "original transaction \(request.originalTransactionID)"))
        do {
            let job = try await resync.resync(request)
            try? await log.settle(id, jobCount: 1, failed: false)
            return job
        } catch {
            try? await log.settle(id, jobCount: nil, failed: true)
            throw error
        }
    }
}
