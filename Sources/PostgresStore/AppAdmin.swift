import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// `receiptq apps`: register apps and manage their API tokens.
public struct AppAdmin {
    private let connection: PostgresConnection

    /// Creates the admin on `connection`.
    public init(connection: PostgresConnection) { self.connection = connection }

    /// Registers an app and issues its first token.
    /// - Returns: the app and the token (shown once: only its hash is stored).
    /// - Parameters:
    ///   - otherBundleIDs: more bundle ids whose receipts belong to this app (an app family).
    public func addApp(
        name: String, bundleID: String, otherBundleIDs: [String] = [], sharedSecret: String?, excludeOldTransactions: Bool = false
    ) throws -> (
        AppRecord, String
    ) {
        let app = AppRecord(
            id: JobID.make(), name: name, bundleID: bundleID, otherBundleIDs: otherBundleIDs, sharedSecret: sharedSecret,
            excludeOldTransactions: excludeOldTransactions)
        let others = PostgresArray.literal(app.bundleIDs.dropFirst().map { Optional($0) })
        return try connection.transaction { connection in
            _ = try connection.query(
                """
                INSERT INTO apps (id, name, bundle_id, other_bundle_ids, shared_secret, exclude_old_transactions)
                VALUES (\(app.id), \(name), \(bundleID), \(others)::text[], \(sharedSecret), \(excludeOldTransactions))
                """)
            return (app, try issueToken(appID: app.id, on: connection))
        }
    }

    /// Every registered app.
    public func listApps() throws -> [AppRecord] {
        try connection.query(
            "SELECT id, name, bundle_id, other_bundle_ids::text AS other_bundle_ids, shared_secret, exclude_old_transactions FROM apps ORDER BY created_at"
        ).rows.compactMap(Self.appRecord)
    }

    /// The app called `name`.
    public func app(named name: String) throws -> AppRecord? {
        try connection.query(
            "SELECT id, name, bundle_id, other_bundle_ids::text AS other_bundle_ids, shared_secret, exclude_old_transactions FROM apps WHERE name = \(name)"
        ).rows.first.flatMap(Self.appRecord)
    }

    /// Changes an app's shared secret (after a rotation in App Store Connect).
    public func setSharedSecret(appID: UUID, _ secret: String?) throws {
        _ = try connection.query("UPDATE apps SET shared_secret = \(secret), updated_at = now() WHERE id = \(appID)")
    }

    /// Issues a new token for an app; with `revokingOthers`, every older token stops working.
    public func rotateToken(appID: UUID, revokingOthers: Bool) throws -> String {
        try connection.transaction { connection in
            if revokingOthers {
                _ = try connection.query(
                    "UPDATE api_tokens SET revoked_at = now() WHERE app_id = \(appID) AND revoked_at IS NULL")
            }
            return try issueToken(appID: appID, on: connection)
        }
    }

    private func issueToken(appID: UUID, on connection: PostgresConnection) throws -> String {
        let token = "rq_" + Digest.hex(SecureRandom.bytes(24))
        _ = try connection.query(
            """
            INSERT INTO api_tokens (id, app_id, token_sha256, prefix)
            VALUES (\(JobID.make()), \(appID), \(Digest.sha256(Array(token.utf8))), \(String(token.prefix(7))))
            """)
        return token
    }

    static func appRecord(_ row: PostgresRow) -> AppRecord? {
        guard let id = row.uuid("id"), let name = row.string("name"), let bundleID = row.string("bundle_id") else {
            return nil
        }
        return AppRecord(
            id: id, name: name, bundleID: bundleID, otherBundleIDs: textArray(row.string("other_bundle_ids")),
            sharedSecret: row.string("shared_secret"), excludeOldTransactions: row.bool("exclude_old_transactions") ?? false)
    }

    /// Postgres's text form of a `text[]` of bundle ids (`{a,b}`; quotes only around unusual values).
    static func textArray(_ text: String?) -> [String] {
        guard let text, text.count > 2 else { return [] }
        return text.dropFirst().dropLast().split(separator: ",").map {
            $0.hasPrefix("\"") && $0.hasSuffix("\"") && $0.count >= 2 ? String($0.dropFirst().dropLast()) : String($0)
        }
    }
}
