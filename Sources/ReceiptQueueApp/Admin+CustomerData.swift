import Foundation
import Libpq
import PostgresStore
import ReceiptCore

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
