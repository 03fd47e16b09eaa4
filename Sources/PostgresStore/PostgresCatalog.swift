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
        // Tokens look like `rq_` + 48 hex digits; anything else cannot be one of ours.
        guard token.utf8.count >= 7, token.utf8.count <= 128 else { return nil }
        let hash = Digest.sha256(Array(token.utf8))
        let key = Digest.hex(hash)
        if let hit = cache.withLock({ $0[key] }), Date().timeIntervalSince(hit.loadedAt) < cacheTTL { return hit.app }
        let prefix = String(token.prefix(7))
        let app = try await pool.withConnection { connection in
            // Found by the public prefix, then the stored hash compared in constant time: neither
            // an index walk nor `=` on the secret's hash decides the answer.
            try connection.query(
                """
                SELECT t.token_sha256, a.id, a.name, a.bundle_id, a.other_bundle_ids::text AS other_bundle_ids,
                       a.shared_secret, a.exclude_old_transactions
                FROM api_tokens t JOIN apps a ON a.id = t.app_id
                WHERE t.prefix = \(prefix) AND t.revoked_at IS NULL
                """
            ).rows.first { row in row.bytes("token_sha256").map { Digest.constantTimeEqual($0, hash) } ?? false }
                .flatMap(AppAdmin.appRecord)
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
