import Foundation
import Libpq
import ReceiptCore

extension AppAdmin {
    /// Sets how many days an app keeps `kind` (0: forever), or back to the deployment's setting
    /// when `days` is nil.
    public func setRetention(appID: UUID, kind: RetentionKind, days: Int?) throws {
        if let days {
            _ = try connection.query(
                """
                INSERT INTO app_retention (app_id, kind, days) VALUES (\(appID), \(kind.rawValue), \(days))
                ON CONFLICT (app_id, kind) DO UPDATE SET days = EXCLUDED.days, updated_at = now()
                """)
        } else {
            _ = try connection.query("DELETE FROM app_retention WHERE app_id = \(appID) AND kind = \(kind.rawValue)")
        }
    }

    /// An app's own retention, by kind (the kinds left out follow the deployment).
    public func retention(appID: UUID) throws -> [RetentionOverride] {
        try connection.query("SELECT kind, days FROM app_retention WHERE app_id = \(appID) ORDER BY kind").rows.compactMap { row in
            guard let kind = row.string("kind").flatMap(RetentionKind.init(rawValue:)), let days = row.int("days") else { return nil }
            return RetentionOverride(appID: appID, kind: kind, days: days)
        }
    }
}
