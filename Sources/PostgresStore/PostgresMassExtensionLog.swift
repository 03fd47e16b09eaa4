import Foundation
import Libpq
import ReceiptCore

/// ``MassExtensionLog`` in Postgres (`mass_extensions`, migration 0023), on a pool.
public final class PostgresMassExtensionLog: MassExtensionLog {
    private let pool: PostgresConnectionPool

    /// Creates the log on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func record(_ item: MassExtensionRecord) async throws {
        let storefronts = PostgresArray.literal(item.storefrontCountryCodes.map { Optional($0) })
        try await pool.withConnection { connection in
            _ = try connection.query(
                """
                INSERT INTO mass_extensions (app_id, request_identifier, environment, product_id, extend_by_days, extend_reason_code,
                                             storefront_country_codes, requested_by, requested_at)
                VALUES (\(item.appID), \(item.requestIdentifier), \(item.environment.rawValue), \(item.productID), \(item.days),
                        \(item.reason.rawValue), \(storefronts)::text[], \(item.requestedBy), \(item.requestedAt))
                ON CONFLICT (app_id, request_identifier) DO NOTHING
                """)
        }
    }

    public func update(appID: UUID, requestIdentifier: UUID, progress: MassExtensionProgress, at: Date) async throws {
        try await pool.withConnection { connection in
            _ = try connection.query(
                """
                UPDATE mass_extensions SET complete = \(progress.isComplete), completed_at = \(progress.completedAt),
                       succeeded_count = \(progress.succeededCount), failed_count = \(progress.failedCount), checked_at = \(at)
                WHERE app_id = \(appID) AND request_identifier = \(requestIdentifier)
                """)
        }
    }

    public func find(appID: UUID, requestIdentifier: UUID) async throws -> MassExtensionRecord? {
        try await pool.withConnection(.readOnly) { connection in
            try connection.query(
                "SELECT \(unescaped: Self.columns) FROM mass_extensions WHERE app_id = \(appID) AND request_identifier = \(requestIdentifier)"
            ).rows.compactMap(Self.record).first
        }
    }

    public func list(appID: UUID, limit: Int) async throws -> [MassExtensionRecord] {
        try await pool.withConnection(.readOnly) { connection in
            try connection.query(
                """
                SELECT \(unescaped: Self.columns) FROM mass_extensions WHERE app_id = \(appID)
                ORDER BY requested_at DESC LIMIT \(max(1, min(limit, 500)))
                """
            ).rows.compactMap(Self.record)
        }
    }

    static let columns = """
        app_id, request_identifier, environment, product_id, extend_by_days, extend_reason_code,
        array_to_json(storefront_country_codes)::text AS storefronts, requested_by, requested_at, complete, completed_at,
        succeeded_count, failed_count, checked_at
        """

    static func record(_ row: PostgresRow) -> MassExtensionRecord? {
        guard let appID = row.uuid("app_id"), let request = row.uuid("request_identifier"),
            let environment = row.string("environment").flatMap(AppStoreEnvironment.init(rawValue:)), let product = row.string("product_id"),
            let days = row.int("extend_by_days"), let reason = row.int("extend_reason_code").flatMap(ExtendReason.init(rawValue:)),
            let requestedBy = row.string("requested_by"), let requestedAt = row.date("requested_at")
        else { return nil }
        let storefronts = row.string("storefronts").flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) } ?? []
        return MassExtensionRecord(
            appID: appID, environment: environment, productID: product, requestIdentifier: request, days: days, reason: reason,
            storefrontCountryCodes: storefronts, requestedBy: requestedBy, requestedAt: requestedAt, isComplete: row.bool("complete") ?? false,
            completedAt: row.date("completed_at"), succeededCount: row.int("succeeded_count"), failedCount: row.int("failed_count"),
            checkedAt: row.date("checked_at"))
    }
}
