import Foundation
import Libpq
import ReceiptCore

extension AppAdmin {
    /// Changes an app's call-budget settings (issue 42); nil leaves a setting as it is.
    /// - Parameters:
    ///   - trust: `local`, `apple`, or back to the default.
    ///   - freshness: how long after Apple signed it a transaction may be trusted locally (whole
    ///     seconds, at least one).
    public func setJWSTrust(appID: UUID, trust: JWSTrustChoice?, freshness: TimeInterval?) throws {
        let seconds = freshness.map { String(max(1, Int($0.rounded()))) }
        _ = try connection.query(
            """
            UPDATE apps SET
                jws_trust = CASE WHEN \(trust?.rawValue)::text IS NULL THEN jws_trust ELSE \(trust?.trust?.rawValue)::text END,
                jws_freshness_seconds = COALESCE(\(seconds)::integer, jws_freshness_seconds),
                updated_at = now()
            WHERE id = \(appID)
            """)
    }
}
