import Foundation
import PostgresStore
import ReceiptCore

extension ReceiptQueueApp.Admin {
    /// Sets how many days an app keeps one kind of data (0: forever; nil: the deployment's
    /// `RETENTION_<KIND>_DAYS` again). Audited as the caller's `audit`.
    public func setRetention(appID: UUID, kind: RetentionKind, days: Int?, audit: AuditAction) throws {
        try trail.run(audit.on(appID, "\(kind.rawValue) \(days.map { "\($0) days" } ?? "default")")) {
            try apps.setRetention(appID: appID, kind: kind, days: days)
        }
    }

    /// An app's own retention, by kind.
    public func retention(appID: UUID) throws -> [RetentionOverride] { try apps.retention(appID: appID) }
}
