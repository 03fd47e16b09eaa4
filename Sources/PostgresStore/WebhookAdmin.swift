import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// A webhook endpoint as operators list it (never its secrets).
public struct WebhookEndpointSummary: Sendable, Equatable {
    public var id: UUID
    public var appID: UUID
    public var appName: String
    public var url: String
    /// Empty: every event.
    public var eventTypes: [String]
    public var allowPrivate: Bool
    public var description: String?
    public var pausedAt: Date?
    public var failingSince: Date?
    public var createdAt: Date
    /// Deliveries not yet settled (pending or being attempted), and in the dead letters.
    public var unsettled: Int
    public var dead: Int
}

/// Why a webhook endpoint could not be registered or changed (bounded; never a secret).
public struct WebhookAdminError: Error, Equatable, CustomStringConvertible {
    /// A bounded code (`invalid_url`, `invalid_event_type`, `no_secrets_key`, `not_found`).
    public let code: String
    public let description: String

    /// The URL is not absolute https (http only with `allow_private`), or carries credentials.
    public static let invalidURL = Self(
        code: "invalid_url", description: "the URL must be absolute https:// without credentials (http:// only with --allow-private)")
    /// An event filter entry names no event type.
    public static let invalidEventType = Self(
        code: "invalid_event_type", description: "an event filter entry names no event type (e.g. subscription.renewed, subscription.*)")
    /// No `RECEIPTQ_SECRETS_KEY`: secrets are never stored in clear.
    public static let noSecretsKey = Self(
        code: "no_secrets_key", description: "RECEIPTQ_SECRETS_KEY is not set: webhook secrets are stored sealed with it")
    /// No such endpoint.
    public static let notFound = Self(code: "not_found", description: "no such webhook endpoint")
}

/// `receiptq webhooks`: the endpoints of each app that events are delivered to.
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
        appID: UUID, url: String, eventTypes: [String] = [], allowPrivate: Bool = false, description: String? = nil
    ) throws -> (id: UUID, secret: String) {
        guard let secrets else { throw WebhookAdminError.noSecretsKey }
        _ = try Self.validate(url: url, allowPrivate: allowPrivate)
        guard eventTypes.allSatisfy(EventType.isValidPattern) else { throw WebhookAdminError.invalidEventType }
        let id = JobID.make()
        let secret = Self.newSecret()
        let sealed = try secrets.seal(Array(secret.utf8), context: Array(id.canonical.utf8))
        _ = try connection.query(
            """
            INSERT INTO webhook_endpoints (id, app_id, url, event_types, secret_sealed, allow_private, description)
            VALUES (\(id), \(appID), \(url), \(PostgresArray.literal(eventTypes.map { Optional($0) }))::text[], \(sealed), \(allowPrivate),
                    \(description))
            """)
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

    /// Removes an endpoint and its deliveries; returns whether it existed.
    @discardableResult
    public func remove(id: UUID) throws -> Bool {
        try connection.query("DELETE FROM webhook_endpoints WHERE id = \(id) RETURNING id").rows.count == 1
    }

    /// Issues a new signing secret (shown once). The old one keeps signing too for `overlap`, so
    /// a receiver can switch without rejecting a delivery.
    public func rotateSecret(id: UUID, overlap: TimeInterval = 24 * 3600) throws -> String {
        guard let secrets else { throw WebhookAdminError.noSecretsKey }
        let secret = Self.newSecret()
        let sealed = try secrets.seal(Array(secret.utf8), context: Array(id.canonical.utf8))
        let rows = try connection.query(
            """
            UPDATE webhook_endpoints SET previous_sealed = secret_sealed, previous_expires_at = now() + make_interval(secs => \(overlap)),
                secret_sealed = \(sealed), updated_at = now()
            WHERE id = \(id) RETURNING id
            """
        ).rows
        guard !rows.isEmpty else { throw WebhookAdminError.notFound }
        return secret
    }

    /// Pauses (nothing is sent; events wait) or resumes an endpoint. Resuming forgets the run of
    /// failures, so the endpoint gets a new day before it is paused again.
    public func setPaused(id: UUID, _ paused: Bool) throws {
        let rows = try connection.query(
            """
            UPDATE webhook_endpoints SET paused_at = CASE WHEN \(paused) THEN COALESCE(paused_at, now()) END,
                failing_since = CASE WHEN \(paused) THEN failing_since END, updated_at = now()
            WHERE id = \(id) RETURNING id
            """
        ).rows
        guard !rows.isEmpty else { throw WebhookAdminError.notFound }
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
