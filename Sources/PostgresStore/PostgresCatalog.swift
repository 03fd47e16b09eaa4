import Foundation
import Libpq
import OpenSSL
import ReceiptCore
import Synchronization

/// The API's read side of Postgres: token authentication (cached) and stored receipts.
public final class PostgresCatalog: ReceiptCatalog {
    let pool: PostgresConnectionPool
    private let cache = Mutex<[String: (app: AppRecord, loadedAt: Date)]>([:])
    private let cacheTTL: TimeInterval
    /// Softphone credentials by username, cached like tokens (a softphone retries each call after
    /// a Digest challenge, so every purchase looks its username up twice).
    private let softphoneCache = Mutex<[String: (credentials: SoftphoneCredentials, loadedAt: Date)]>([:])

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
        guard token.utf8.count >= 7, token.utf8.count <= 128, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        let hash = Digest.sha256(Array(token.utf8))
        let key = Digest.hex(hash)
        if let hit = cache.withLock({ $0[key] }), Date().timeIntervalSince(hit.loadedAt) < cacheTTL { return hit.app }
        let prefix = String(token.prefix(7))
        let app = try await lookup { connection in
            // Found by the public prefix, then the stored hash compared in constant time: neither
            // an index walk nor `=` on the secret's hash decides the answer.
            try connection.query(
                """
                SELECT t.token_sha256, \(unescaped: AppAdmin.appColumns)
                FROM api_tokens t JOIN apps ON apps.id = t.app_id LEFT JOIN app_server_api_keys k ON k.app_id = apps.id
                WHERE t.prefix = \(prefix) AND t.revoked_at IS NULL
                """
            ).rows.first { row in row.bytes("token_sha256").map { Digest.constantTimeEqual($0, hash) } ?? false }
                // The ingestion side never needs the In-App Purchase key: it is not decrypted here.
                .flatMap { AppAdmin.appRecord($0, secrets: nil) }
        }
        if let app { cache.withLock { $0[key] = (app, Date()) } }
        return app
    }

    /// The softphone credentials registered under `username` in the current realm; a changed or
    /// removed set stops working after at most the cache TTL.
    public func softphoneCredentials(username: String) async throws -> SoftphoneCredentials? {
        guard SoftphoneCredentials.problem(username: username) == nil else { return nil }
        if let hit = softphoneCache.withLock({ $0[username] }), Date().timeIntervalSince(hit.loadedAt) < cacheTTL {
            return hit.credentials
        }
        let credentials = try await lookup { connection in
            try connection.query(
                """
                SELECT c.username, c.ha1_md5, c.ha1_sha256, \(unescaped: AppAdmin.appColumns)
                FROM softphone_credentials c JOIN apps ON apps.id = c.app_id LEFT JOIN app_server_api_keys k ON k.app_id = apps.id
                WHERE c.username = \(username) AND c.realm = \(SoftphoneCredentials.realm)
                """
            ).rows.first.flatMap { row -> SoftphoneCredentials? in
                guard let app = AppAdmin.appRecord(row, secrets: nil), let md5 = row.bytes("ha1_md5"), let sha256 = row.bytes("ha1_sha256") else {
                    return nil
                }
                return SoftphoneCredentials(app: app, username: username, ha1MD5: md5, ha1SHA256: sha256)
            }
        }
        if let credentials {
            softphoneCache.withLock { cache in
                // Usernames come from unauthenticated requests, but only known ones are cached, so
                // the cache is bounded by the number of registered apps.
                cache[username] = (credentials, Date())
            }
        }
        return credentials
    }

    /// Runs one read, once more on a fresh session when the connection dropped under it (a
    /// Postgres restart must not cost the next request a 503). A value the database refuses (``PostgresError/isDataError``: a NUL, an
    /// impossible value) can never match a row: it becomes a permanent ``StoreFailure``, which the
    /// API answers 422 or 404, never "retry later"; only the connection's failures stay transient.
    func lookup<T: Sendable>(_ body: @Sendable (PostgresConnection) throws -> T) async throws -> T {
        do {
            return try await pool.withConnection(.readOnly, body)
        } catch let error as PostgresError where error.isDataError {
            throw StoreFailure(
                code: error.sqlState.map { .sqlState($0) } ?? .driver("\(error.code)"), message: "Postgres refused the lookup: \(error.message)",
                isPermanent: true)
        }
    }

    /// Every registered app (the dashboard's app filter).
    public func apps() async throws -> [AppRecord] {
        try await pool.withConnection(.readOnly) { try AppAdmin(connection: $0).listApps() }
    }

    public func ping() async -> Bool { await pool.ping() }

    public func notificationApp(name: String, token: String) async throws -> AppRecord? {
        guard token.utf8.count >= 16, token.utf8.count <= 128, name.utf8.count <= 200 else { return nil }
        let hash = Digest.sha256(Array(token.utf8))
        let key = "n\u{0}\(name)\u{0}\(Digest.hex(hash))"
        if let hit = cache.withLock({ $0[key] }), Date().timeIntervalSince(hit.loadedAt) < cacheTTL { return hit.app }
        let app = try await lookup { connection in
            // Found by the app's (public) name; the token's hash compared in constant time.
            try connection.query(
                "SELECT apps.notification_token_sha256, \(unescaped: AppAdmin.appColumns) \(unescaped: AppAdmin.appTables) WHERE apps.name = \(name)"
            ).rows.first { row in row.bytes("notification_token_sha256").map { Digest.constantTimeEqual($0, hash) } ?? false }
                .flatMap { AppAdmin.appRecord($0, secrets: nil) }
        }
        if let app { cache.withLock { $0[key] = (app, Date()) } }
        return app
    }

    public func receipt(id: UUID, appID: UUID) async throws -> ReceiptResource? {
        try await lookup { connection in
            try ReceiptRows.resource(connection, id: id, appID: appID)
        }
    }
}

extension PostgresCatalog: SubscriptionCatalog {
    public func entitlements(appID: UUID, userIdentifier: String) async throws -> UserEntitlements {
        try await lookup { connection in
            try SubscriptionRows.entitlements(connection, appID: appID, userIdentifier: userIdentifier)
        }
    }

    public func subscription(appID: UUID, originalTransactionID: String, environment: String?) async throws -> SubscriptionResource? {
        try await lookup { connection in
            try SubscriptionRows.subscription(
                connection, appID: appID, originalTransactionID: originalTransactionID, environment: environment)
        }
    }
}
