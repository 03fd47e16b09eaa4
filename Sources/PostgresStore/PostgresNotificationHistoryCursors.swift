import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// The history sweep's Postgres side: which apps it covers and where each stands.
public final class PostgresNotificationHistoryCursors: NotificationHistoryCursors {
    private let pool: PostgresConnectionPool
    private let secrets: SecretBox?
    private let onlyApps: [UUID]?

    /// Creates the cursors.
    /// - Parameters:
    ///   - secrets: opens the apps' In-App Purchase keys (nil: no app can be swept).
    ///   - onlyApps: sweep only these (nil: all); tests sharing a database keep to their own.
    public init(pool: PostgresConnectionPool, secrets: SecretBox?, onlyApps: [UUID]? = nil) {
        self.pool = pool
        self.secrets = secrets
        self.onlyApps = onlyApps
    }

    public func sweptApps() async throws -> [AppRecord] {
        let secrets = self.secrets
        let only = onlyApps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT \(unescaped: AppAdmin.appColumns) \(unescaped: AppAdmin.appTables)
                WHERE apps.notification_token_sha256 IS NOT NULL AND k.key_id IS NOT NULL
                  AND (\(only)::uuid[] IS NULL OR apps.id = ANY(\(only)::uuid[]))
                ORDER BY apps.name
                """
            ).rows.compactMap { AppAdmin.appRecord($0, secrets: secrets) }.filter { $0.serverAPIKey != nil }
        }
    }

    public func cursor(appID: UUID, environment: AppStoreEnvironment) async throws -> NotificationHistoryCursor? {
        let row = try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT window_start, window_end, pagination_token FROM notification_history_cursors
                WHERE app_id = \(appID) AND environment = \(environment.rawValue)
                """
            ).rows.first
        }
        guard let row, let start = row.date("window_start"), let end = row.date("window_end") else { return nil }
        return NotificationHistoryCursor(start: start, end: end, paginationToken: row.string("pagination_token"))
    }

    public func save(_ cursor: NotificationHistoryCursor, appID: UUID, environment: AppStoreEnvironment) async throws {
        _ = try await pool.withConnection { connection in
            try connection.query(
                """
                INSERT INTO notification_history_cursors (app_id, environment, window_start, window_end, pagination_token)
                VALUES (\(appID), \(environment.rawValue), \(cursor.start), \(cursor.end), \(cursor.paginationToken))
                ON CONFLICT (app_id, environment) DO UPDATE SET window_start = EXCLUDED.window_start,
                    window_end = EXCLUDED.window_end, pagination_token = EXCLUDED.pagination_token, updated_at = now()
                """)
        }
    }

    public func silentApps(since: Date) async throws -> Int {
        let only = onlyApps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT count(*) AS n FROM apps
                WHERE notification_token_sha256 IS NOT NULL AND notification_token_issued_at < \(since)
                  AND (\(only)::uuid[] IS NULL OR apps.id = ANY(\(only)::uuid[]))
                  AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.app_id = apps.id AND n.created_at >= \(since))
                """
            ).rows.first?.int("n") ?? 0
        }
    }
}
