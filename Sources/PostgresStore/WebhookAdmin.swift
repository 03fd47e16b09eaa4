import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// `receiptq webhooks` and the dashboard's webhooks page: the endpoints of each app that events
/// are delivered to. Every change writes its audit line in its own transaction.
public struct WebhookAdmin {
    let connection: PostgresConnection
    let secrets: SecretBox?

    /// Creates the admin on `connection`; `secrets` seals the endpoints' signing secrets.
    public init(connection: PostgresConnection, secrets: SecretBox?) {
        self.connection = connection
        self.secrets = secrets
    }

    /// Checks a URL as an endpoint: absolute https (http only where private addresses are
    /// allowed: a receiver inside the deployment), a host, no credentials, at most 2,048 bytes.
    public static func validate(url: String, allowPrivate: Bool) throws -> URLComponents {
        guard url.utf8.count <= 2048, let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "https" || (scheme == "http" && allowPrivate), let host = components.host, !host.isEmpty,
            components.user == nil, components.password == nil, components.fragment == nil
        else { throw WebhookAdminError.invalidURL }
        return components
    }

    /// Registers an endpoint; returns it and its signing secret (shown once).
    /// - Parameter eventTypes: types or families (`subscription.*`); empty for every event.
    public func add(
        appID: UUID, url: String, eventTypes: [String] = [], allowPrivate: Bool = false, description: String? = nil, audit: AuditAction
    ) throws -> (id: UUID, secret: String) {
        guard let secrets else { throw WebhookAdminError.noSecretsKey }
        _ = try Self.validate(url: url, allowPrivate: allowPrivate)
        guard eventTypes.allSatisfy(EventType.isValidPattern) else { throw WebhookAdminError.invalidEventType }
        let id = JobID.make()
        let secret = Self.newSecret()
        let sealed = try secrets.seal(Array(secret.utf8), context: Array(id.canonical.utf8))
        try connection.transaction { connection in
            guard !(try connection.query("SELECT 1 FROM apps WHERE id = \(appID)").rows.isEmpty) else { throw WebhookAdminError.unknownApp }
            _ = try connection.query(
                """
                INSERT INTO webhook_endpoints (id, app_id, url, event_types, secret_sealed, allow_private, description)
                VALUES (\(id), \(appID), \(url), \(PostgresArray.literal(eventTypes.map { Optional($0) }))::text[], \(sealed),
                        \(allowPrivate), \(description))
                """)
            var action = audit.with(target: "\(id.canonical) \(Self.redactedURL(url))")
            action.appID = appID
            try AuditRows.begin(action, outcome: "done", on: connection)
        }
        return (id, secret)
    }

    /// Every endpoint (of one app, when given), oldest first, with its delivery counts.
    public func list(appID: UUID? = nil) throws -> [WebhookEndpointSummary] {
        try connection.query(
            """
            SELECT w.id, w.app_id, a.name AS app_name, w.url, array_to_json(w.event_types)::text AS event_types, w.allow_private,
                   w.description, w.paused_at, w.failing_since, w.created_at,
                   (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id AND d.status IN ('pending', 'queued')) AS unsettled,
                   (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id AND d.status = 'dead') AS dead
            FROM webhook_endpoints w JOIN apps a ON a.id = w.app_id
            WHERE \(appID)::uuid IS NULL OR w.app_id = \(appID)
            ORDER BY w.created_at, w.id
            """
        ).rows.compactMap { row in
            guard let id = row.uuid("id"), let app = row.uuid("app_id"), let url = row.string("url") else { return nil }
            let types = row.string("event_types").flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) } ?? []
            return WebhookEndpointSummary(
                id: id, appID: app, appName: row.string("app_name") ?? "", url: url, eventTypes: types,
                allowPrivate: row.bool("allow_private") ?? false, description: row.string("description"), pausedAt: row.date("paused_at"),
                failingSince: row.date("failing_since"), createdAt: row.date("created_at") ?? Date(), unsettled: row.int("unsettled") ?? 0,
                dead: row.int("dead") ?? 0)
        }
    }

    /// Removes an endpoint and its deliveries.
    /// - Throws: ``WebhookAdminError/notFound``.
    public func remove(id: UUID, audit: AuditAction) throws {
        try connection.transaction { connection in
            let rows = try connection.query("DELETE FROM webhook_endpoints WHERE id = \(id) RETURNING app_id, url").rows
            guard let row = rows.first else { throw WebhookAdminError.notFound }
            try Self.record(audit, id: id, row: row, on: connection)
        }
    }

    /// Issues a new signing secret (shown once). The old one keeps signing too for `overlap`, so
    /// a receiver can switch without rejecting a delivery.
    public func rotateSecret(id: UUID, overlap: TimeInterval = 24 * 3600, audit: AuditAction) throws -> String {
        guard let secrets else { throw WebhookAdminError.noSecretsKey }
        let secret = Self.newSecret()
        let sealed = try secrets.seal(Array(secret.utf8), context: Array(id.canonical.utf8))
        try connection.transaction { connection in
            let rows = try connection.query(
                """
                UPDATE webhook_endpoints SET previous_sealed = secret_sealed,
                    previous_expires_at = now() + make_interval(secs => \(overlap)), secret_sealed = \(sealed), updated_at = now()
                WHERE id = \(id) RETURNING app_id, url
                """
            ).rows
            guard let row = rows.first else { throw WebhookAdminError.notFound }
            try Self.record(audit, id: id, row: row, on: connection)
        }
        return secret
    }

    /// Pauses (nothing is sent; events wait) or resumes an endpoint. Resuming forgets the run of
    /// failures, so the endpoint gets a new day before it is paused again.
    public func setPaused(id: UUID, _ paused: Bool, audit: AuditAction) throws {
        try connection.transaction { connection in
            let rows = try connection.query(
                """
                UPDATE webhook_endpoints SET paused_at = CASE WHEN \(paused) THEN COALESCE(paused_at, now()) END,
                    failing_since = CASE WHEN \(paused) THEN failing_since END, updated_at = now()
                WHERE id = \(id) RETURNING app_id, url
                """
            ).rows
            guard let row = rows.first else { throw WebhookAdminError.notFound }
            try Self.record(audit, id: id, row: row, on: connection)
        }
    }

    /// Writes the audit line of a change to endpoint `id` (`row`: its app and URL).
    static func record(_ audit: AuditAction, id: UUID, row: PostgresRow, on connection: PostgresConnection) throws {
        var action = audit.with(target: "\(id.canonical) \(redactedURL(row.string("url") ?? ""))")
        action.appID = row.uuid("app_id")
        try AuditRows.begin(action, outcome: "done", on: connection)
    }

    /// An endpoint's URL without its query string, which may carry a token of the customer's.
    public static func redactedURL(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return "(unreadable URL)" }
        if components.query != nil { components.query = "…" }
        return components.string ?? "(unreadable URL)"
    }

    /// The endpoint with its secrets opened (for `webhooks test`).
    public func endpoint(id: UUID) throws -> WebhookEndpointRecord? {
        try WebhookRows.endpoint(id: id, secrets: secrets, on: connection)
    }

    /// `whsec_` and 32 random bytes, base64url: the HMAC key is the whole string's UTF-8.
    static func newSecret() -> String {
        "whsec_"
            + Data(SecureRandom.bytes(32)).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}
