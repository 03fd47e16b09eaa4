import Foundation

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

    /// Creates a summary.
    public init(
        id: UUID, appID: UUID, appName: String, url: String, eventTypes: [String], allowPrivate: Bool, description: String?,
        pausedAt: Date?, failingSince: Date?, createdAt: Date, unsettled: Int, dead: Int
    ) {
        self.id = id
        self.appID = appID
        self.appName = appName
        self.url = url
        self.eventTypes = eventTypes
        self.allowPrivate = allowPrivate
        self.description = description
        self.pausedAt = pausedAt
        self.failingSince = failingSince
        self.createdAt = createdAt
        self.unsettled = unsettled
        self.dead = dead
    }
}

/// Why a webhook endpoint could not be registered or changed (bounded; never a secret).
public struct WebhookAdminError: Error, Equatable, CustomStringConvertible {
    /// The closed set of reasons; `rawValue` is the stable string the API's JSON and the CLI show.
    public enum Code: String, Sendable {
        case privateAddress = "private_address"
        case invalidURL = "invalid_url"
        case invalidEventType = "invalid_event_type"
        case noSecretsKey = "no_secrets_key"
        case unknownApp = "unknown_app"
        case notFound = "not_found"
    }

    /// A bounded code (`invalid_url`, `private_address`, `unknown_app`, `invalid_event_type`, `no_secrets_key`, `not_found`).
    public let code: Code
    public let description: String

    /// The host resolves only to loopback, private or link-local addresses (without `allow_private`).
    public static let privateAddress = Self(
        code: .privateAddress,
        description: "the host resolves to a loopback, private or link-local address; allow private addresses if it is meant to")

    /// The URL is not absolute https (http only with `allow_private`), or carries credentials.
    public static let invalidURL = Self(
        code: .invalidURL, description: "the URL must be absolute https:// without credentials (http:// only with --allow-private)")
    /// An event filter entry names no event type.
    public static let invalidEventType = Self(
        code: .invalidEventType, description: "an event filter entry names no event type (e.g. subscription.renewed, subscription.*)")
    /// No `RECEIPTQ_SECRETS_KEY`: secrets are never stored in clear.
    public static let noSecretsKey = Self(
        code: .noSecretsKey, description: "RECEIPTQ_SECRETS_KEY is not set: webhook secrets are stored sealed with it")
    /// No app has this id.
    public static let unknownApp = Self(code: .unknownApp, description: "no app has this id")
    /// No such endpoint.
    public static let notFound = Self(code: .notFound, description: "no such webhook endpoint")
}

/// Managing the webhook endpoints from the dashboard and the admin API (admins only). Every change
/// writes its audit line in the change's own transaction.
public protocol WebhookAdministration: Sendable {
    /// Every endpoint (of one app), oldest first, with its delivery counts.
    func endpoints(appID: UUID?) async throws -> [WebhookEndpointSummary]
    /// Registers an endpoint; returns it and its signing secret (shown once).
    /// - Throws: ``WebhookAdminError`` for a URL, filter or address that cannot be an endpoint.
    func add(
        appID: UUID, url: String, eventTypes: [String], allowPrivate: Bool, description: String?, audit: AuditAction
    ) async throws -> (id: UUID, secret: String)
    /// Removes an endpoint and its undelivered deliveries. - Throws: ``WebhookAdminError/notFound``.
    func remove(id: UUID, audit: AuditAction) async throws
    /// Issues a new secret (shown once); the old one signs too for `overlap`.
    func rotateSecret(id: UUID, overlap: TimeInterval, audit: AuditAction) async throws -> String
    /// Pauses or resumes deliveries to an endpoint.
    func setPaused(id: UUID, _ paused: Bool, audit: AuditAction) async throws
    /// Sends a signed `webhook.test` delivery now (nothing stored) and reports the answer; the
    /// caller audits it. - Throws: ``WebhookAdminError/notFound``, ``WebhookAdminError/noSecretsKey``.
    func test(id: UUID) async throws -> WebhookReport
}
