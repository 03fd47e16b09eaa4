import Foundation
import PostgresStore
import ReceiptCore

extension ReceiptQueueApp.Admin {
    /// The app's transfer rule.
    public func transferRule(appID: UUID) throws -> TransferRule { try apps.transferRule(appID: appID) }

    /// Sets the app's transfer rule; the audit line (`audit`, e.g. `app.transfer_rule`) is written
    /// in the same transaction.
    public func setTransferRule(_ rule: TransferRule, appID: UUID, audit: AuditAction) throws {
        try apps.setTransferRule(rule, appID: appID, audit: audit)
    }
}
