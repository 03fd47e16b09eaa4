import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import RedisJobQueue

extension ReceiptQueueApp.Admin {
    /// `receiptq customers export`: everything held about the user of `appID` (with every id merged
    /// with it), as one JSON document in pieces to `write`, after its audit line.
    public func exportCustomer(
        appID: UUID, userIdentifier: String, audit: AuditAction, write: (String) async throws -> Void
    )
        async throws
    {
        let postgres = configuration.postgres
        let export = PostgresCustomerExport { try PostgresConnection(configuration: postgres, label: "customer-export") }
        try AuditTrail(connection: connection).run(audit) {}
        try await export.export(appID: appID, userIdentifier: userIdentifier, at: Date(), write: write)
    }
}

extension ReceiptQueueApp.Admin {
    /// `receiptq customers erase`: erases the user of `appID` and every id merged with it
    /// (``CustomerEraser``: the database in one transaction with its audit line, then the queues).
    /// - Returns: what was erased and how many jobs were dropped, or nil when nothing held the user.
    public func eraseCustomer(
        appID: UUID, userIdentifier: String, audit: AuditAction, logger: Logger = Logger.current
    ) async throws -> (
        ErasedCustomer, droppedJobs: Int
    )? {
        let postgres = PostgresConnectionPool(configuration: configuration.postgres, size: 1, logger: logger)
        let redis = RedisConnectionPool(configuration: configuration.redis, size: 1, logger: logger)
        defer {
            redis.close()
            postgres.close()
        }
        let eraser = CustomerEraser(
            database: PostgresCustomerErasure(pool: postgres), jobs: RedisCustomerJobPurge(pool: redis, keys: configuration.keys))
        return try await eraser.erase(appID: appID, userIdentifier: userIdentifier, audit: audit, at: Date())
    }
}
