import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// `receiptq apps`: register apps and manage their API tokens.
public struct AppAdmin {
    let connection: PostgresConnection

    /// Creates the admin on `connection`.
    let secrets: SecretBox?

    /// Creates the admin side on `connection`.
    /// - Parameter secrets: seals and opens the apps' In-App Purchase keys (nil: keys can be
    ///   neither set nor read).
    public init(connection: PostgresConnection, secrets: SecretBox? = nil) {
        self.connection = connection
        self.secrets = secrets
    }

    /// Registers an app and issues its first token.
    /// - Parameters:
    ///   - name: A unique name for the app; nil names it after `bundleID`.
    ///   - bundleID: The bundle id its receipts carry.
    ///   - sharedSecret: The App Store shared secret Apple's `verifyReceipt` expects, if any.
    ///   - excludeOldTransactions: Whether to send `exclude-old-transactions` to Apple.
    ///   - otherBundleIDs: More bundle ids whose receipts belong to this app (an app family).
    /// - Returns: the app and the token (shown once: only its hash is stored).
    public func addApp(
        name: String? = nil, bundleID: String, otherBundleIDs: [String] = [], sharedSecret: String?,
        excludeOldTransactions: Bool = false
    ) throws -> (
        AppRecord, String
    ) {
        // Apple's bundle ids are reverse-DNS text; anything else is a typo, and would not round-trip
        // through the text form of the bundle id array.
        for id in [bundleID] + otherBundleIDs {
            guard !id.isEmpty, id.utf8.count <= 155,
                id.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") })
            else { throw AppAdminError.invalidBundleID }
        }
        // Most deployments register one app per bundle id, so its bundle id is the name people know.
        let name = name ?? bundleID
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
            "SELECT \(unescaped: Self.appColumns) \(unescaped: Self.appTables) ORDER BY apps.created_at"
        ).rows.compactMap { Self.appRecord($0, secrets: secrets) }
    }

    /// The app called `name`.
    public func app(named name: String) throws -> AppRecord? {
        try connection.query(
            "SELECT \(unescaped: Self.appColumns) \(unescaped: Self.appTables) WHERE apps.name = \(name)"
        ).rows.first.flatMap { Self.appRecord($0, secrets: secrets) }
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

    /// Every app's API tokens, by app id: prefixes and dates only, since only hashes are stored.
    public func tokens() throws -> [UUID: [TokenInfo]] {
        let rows = try connection.query(
            "SELECT id, app_id, prefix, created_at, revoked_at FROM api_tokens ORDER BY created_at, id"
        ).rows
        var tokens: [UUID: [TokenInfo]] = [:]
        for row in rows {
            guard let id = row.uuid("id"), let appID = row.uuid("app_id"), let prefix = row.string("prefix"),
                let createdAt = row.date("created_at")
            else { continue }
            tokens[appID, default: []].append(TokenInfo(id: id, prefix: prefix, createdAt: createdAt, revokedAt: row.date("revoked_at")))
        }
        return tokens
    }

    /// Revokes the one active token of an app that starts with `prefix`; the app's other tokens
    /// keep working.
    ///
    /// The API trusts a token it has seen for up to its catalog's cache time (30 s by default), so a
    /// revoked token may still be accepted that long by a running server.
    /// - Parameters:
    ///   - appID: The token's app.
    ///   - prefix: The token's first seven characters (`rq_` and four more, as `apps list` shows
    ///     them), or the whole token.
    /// - Returns: the revoked token.
    /// - Throws: ``AppAdminError`` when the prefix is malformed, matches no active token of the app,
    ///   or matches several (nothing is revoked then).
    @discardableResult
    public func revokeToken(appID: UUID, prefix: String) throws -> TokenInfo {
        let shown = String(prefix.prefix(TokenInfo.prefixLength))
        guard prefix.hasPrefix("rq_"), prefix.count == TokenInfo.prefixLength || prefix.count == Self.tokenLength else {
            throw AppAdminError.malformedPrefix
        }
        return try connection.transaction { connection in
            // The whole token names exactly one row by its hash; a prefix may name several.
            let matches: [PostgresRow]
            if prefix.count == Self.tokenLength {
                matches = try connection.query(
                    """
                    SELECT id, created_at FROM api_tokens
                    WHERE app_id = \(appID) AND token_sha256 = \(Digest.sha256(Array(prefix.utf8))) AND revoked_at IS NULL
                    FOR UPDATE
                    """
                ).rows
            } else {
                matches = try connection.query(
                    """
                    SELECT id, created_at FROM api_tokens
                    WHERE app_id = \(appID) AND prefix = \(shown) AND revoked_at IS NULL
                    FOR UPDATE
                    """
                ).rows
            }
            guard matches.count <= 1 else { throw AppAdminError.ambiguousPrefix }
            guard let row = matches.first, let id = row.uuid("id"), let createdAt = row.date("created_at") else {
                throw AppAdminError.noActiveToken
            }
            let revoked = try connection.query(
                "UPDATE api_tokens SET revoked_at = now() WHERE id = \(id) RETURNING revoked_at"
            ).rows.first?.date("revoked_at")
            return TokenInfo(id: id, prefix: shown, createdAt: createdAt, revokedAt: revoked ?? Date())
        }
    }

    /// Issues the secret half of the app's notification URL (`/apple/notifications/{name}/{token}`),
    /// replacing any earlier one: the URL Apple was given stops working. Only its hash is stored,
    /// so the token is shown once, here.
    /// - Returns: the token.
    public func rotateNotificationToken(appID: UUID) throws -> String {
        let token = Digest.hex(SecureRandom.bytes(24))
        _ = try connection.query(
            """
            UPDATE apps SET notification_token_sha256 = \(Digest.sha256(Array(token.utf8))), notification_token_issued_at = now(),
                updated_at = now()
            WHERE id = \(appID)
            """)
        return token
    }

    /// Whether the app has a notification URL.
    public func hasNotificationURL(appID: UUID) throws -> Bool {
        try connection.query("SELECT notification_token_sha256 IS NOT NULL AS issued FROM apps WHERE id = \(appID)").rows.first?.bool(
            "issued") ?? false
    }

    /// `rq_` and 48 hex digits (24 random bytes).
    private static let tokenLength = 3 + 48

    private func issueToken(appID: UUID, on connection: PostgresConnection) throws -> String {
        let token = "rq_" + Digest.hex(SecureRandom.bytes(24))
        _ = try connection.query(
            """
            INSERT INTO api_tokens (id, app_id, token_sha256, prefix)
            VALUES (\(JobID.make()), \(appID), \(Digest.sha256(Array(token.utf8))), \(String(token.prefix(TokenInfo.prefixLength))))
            """)
        return token
    }

    /// The columns ``appRecord(_:secrets:)`` reads (with ``appTables``): one list, so every query
    /// that loads an app loads all of it.
    static let appColumns = """
        apps.id, apps.name, apps.bundle_id, apps.other_bundle_ids::text AS other_bundle_ids, apps.shared_secret,
        apps.exclude_old_transactions, apps.validation_backend, apps.switched_to_server_api_at, apps.app_apple_id,
        apps.sandbox_policy, apps.device_check, k.issuer_id, k.key_id, k.sealed_key, apps.jws_trust, apps.jws_freshness_seconds,
        apps.notification_token_sha256 IS NOT NULL AS receives_notifications
        """
    /// The tables ``appColumns`` come from.
    static let appTables = "FROM apps LEFT JOIN app_server_api_keys k ON k.app_id = apps.id"

    static func appRecord(_ row: PostgresRow, secrets: SecretBox?) -> AppRecord? {
        guard let id = row.uuid("id"), let name = row.string("name"), let bundleID = row.string("bundle_id") else {
            return nil
        }
        var record = AppRecord(
            id: id, name: name, bundleID: bundleID, otherBundleIDs: textArray(row.string("other_bundle_ids")),
            sharedSecret: row.string("shared_secret"), excludeOldTransactions: row.bool("exclude_old_transactions") ?? false,
            backend: row.string("validation_backend").flatMap(ValidationBackend.init(rawValue:)) ?? .auto,
            switchedToServerAPIAt: row.date("switched_to_server_api_at"), appAppleID: row.string("app_apple_id").flatMap { Int64($0) },
            sandboxPolicy: row.string("sandbox_policy").flatMap(SandboxPolicy.init(rawValue:)) ?? .accept,
            checksDevice: row.bool("device_check") ?? true)
        record.jwsTrust = JWSTrustSettings(
            trust: row.string("jws_trust").flatMap(JWSTrust.init(rawValue:)),
            freshness: row.string("jws_freshness_seconds").flatMap(TimeInterval.init) ?? JWSTrustSettings.defaultFreshness)
        record.receivesNotifications = row.bool("receives_notifications") ?? false
        if let issuer = row.string("issuer_id"), let keyID = row.string("key_id") {
            record.serverAPIKeyID = keyID
            // Unreadable without the right RECEIPTQ_SECRETS_KEY: the key id still says one is set,
            // so the worker can say why the Server API is not used instead of silently skipping it.
            if let sealed = row.bytes("sealed_key"), let pem = secrets?.open(sealed, context: Array(id.uuidString.lowercased().utf8)) {
                record.serverAPIKey = ServerAPIKey(issuerID: issuer, keyID: keyID, privateKeyPEM: String(decoding: pem, as: UTF8.self))
            }
        }
        return record
    }

    /// Postgres's text form of a `text[]` of bundle ids (`{a,b}`; quotes only around unusual values).
    static func textArray(_ text: String?) -> [String] {
        guard let text, text.count > 2 else { return [] }
        return text.dropFirst().dropLast().split(separator: ",").map {
            $0.hasPrefix("\"") && $0.hasSuffix("\"") && $0.count >= 2 ? String($0.dropFirst().dropLast()) : String($0)
        }
    }
}

extension UInt8 {
    fileprivate var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}
