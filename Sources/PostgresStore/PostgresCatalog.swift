import Foundation
import Libpq
import OpenSSL
import ReceiptCore
import Synchronization

/// The API's read side of Postgres: token authentication (cached) and stored receipts.
public final class PostgresCatalog: ReceiptCatalog {
    private let pool: PostgresConnectionPool
    private let cache = Mutex<[String: (app: AppRecord, loadedAt: Date)]>([:])
    private let cacheTTL: TimeInterval

    /// Creates the catalog.
    /// - Parameters:
    ///   - pool: connections for the API's handlers.
    ///   - cacheTTL: how long a successful token lookup is trusted; a revoked token stops working
    ///     after at most this long.
    public init(pool: PostgresConnectionPool, cacheTTL: Duration = .seconds(30)) {
        self.pool = pool
        self.cacheTTL = cacheTTL.seconds
    }

    public func authenticate(token: String) async throws -> AppRecord? {
        let hash = Digest.sha256(Array(token.utf8))
        let key = Digest.hex(hash)
        if let hit = cache.withLock({ $0[key] }), Date().timeIntervalSince(hit.loadedAt) < cacheTTL { return hit.app }
        let app = try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT a.id, a.name, a.bundle_id, a.shared_secret, a.exclude_old_transactions
                FROM api_tokens t JOIN apps a ON a.id = t.app_id
                WHERE t.token_sha256 = \(hash) AND t.revoked_at IS NULL
                """
            ).rows.first.flatMap(AppAdmin.appRecord)
        }
        if let app { cache.withLock { $0[key] = (app, Date()) } }
        return app
    }

    public func receipt(id: UUID, appID: UUID) async throws -> ReceiptResource? {
        try await pool.withConnection { connection in
            try ReceiptRows.resource(connection, id: id, appID: appID)
        }
    }
}
