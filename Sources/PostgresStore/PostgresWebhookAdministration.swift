import Dispatch
import Foundation
import Libpq
import OpenSSL
import ReceiptCore

/// The dashboard's and the admin API's webhook administration: ``WebhookAdmin`` on the API's
/// Postgres pool, the same early address check as `receiptq webhooks add`, and test deliveries.
///
/// The address check and the test delivery are not Postgres's: the composition root passes them
/// in (libcurl's resolver policy, the webhook client), so this adapter links neither.
public final class PostgresWebhookAdministration: WebhookAdministration {
    private let pool: PostgresConnectionPool
    private let secrets: SecretBox?
    private let resolvesOnlyPrivately: @Sendable (String) -> Bool
    private let sendTest: @Sendable (WebhookEndpointRecord) async throws -> WebhookReport

    /// The resolver's blocking look-ups run here, off the request's executor.
    private static let resolver = DispatchQueue(label: "receiptq.webhooks.resolve")

    /// Creates the administration on `pool`.
    /// - Parameters:
    ///   - secrets: seals and opens the endpoints' signing secrets (nil: none can be added or tested).
    ///   - resolvesOnlyPrivately: whether a host resolves to loopback, private or link-local
    ///     addresses only (blocking: it runs on a queue of its own).
    ///   - sendTest: sends one signed `webhook.test` delivery to an endpoint whose secrets are open.
    public init(
        pool: PostgresConnectionPool, secrets: SecretBox?, resolvesOnlyPrivately: @escaping @Sendable (String) -> Bool,
        sendTest: @escaping @Sendable (WebhookEndpointRecord) async throws -> WebhookReport
    ) {
        self.pool = pool
        self.secrets = secrets
        self.resolvesOnlyPrivately = resolvesOnlyPrivately
        self.sendTest = sendTest
    }

    public func endpoints(appID: UUID?) async throws -> [WebhookEndpointSummary] {
        let secrets = secrets
        return try await pool.withConnection { try WebhookAdmin(connection: $0, secrets: secrets).list(appID: appID) }
    }

    public func add(
        appID: UUID, url: String, eventTypes: [String], allowPrivate: Bool, description: String?, audit: AuditAction
    ) async throws -> (id: UUID, secret: String) {
        let components = try WebhookAdmin.validate(url: url, allowPrivate: allowPrivate)
        if !allowPrivate, let host = components.host {
            let resolvesOnlyPrivately = resolvesOnlyPrivately
            let onlyPrivate = await withCheckedContinuation { continuation in
                Self.resolver.async { continuation.resume(returning: resolvesOnlyPrivately(host)) }
            }
            if onlyPrivate { throw WebhookAdminError.privateAddress }
        }
        let secrets = secrets
        return try await pool.withConnection { connection in
            try WebhookAdmin(connection: connection, secrets: secrets).add(
                appID: appID, url: url, eventTypes: eventTypes, allowPrivate: allowPrivate, description: description, audit: audit)
        }
    }

    public func remove(id: UUID, audit: AuditAction) async throws {
        try await pool.withConnection { try WebhookAdmin(connection: $0, secrets: nil).remove(id: id, audit: audit) }
    }

    public func rotateSecret(id: UUID, overlap: TimeInterval, audit: AuditAction) async throws -> String {
        let secrets = secrets
        return try await pool.withConnection {
            try WebhookAdmin(connection: $0, secrets: secrets).rotateSecret(id: id, overlap: overlap, audit: audit)
        }
    }

    public func setPaused(id: UUID, _ paused: Bool, audit: AuditAction) async throws {
        try await pool.withConnection { try WebhookAdmin(connection: $0, secrets: nil).setPaused(id: id, paused, audit: audit) }
    }

    public func test(id: UUID) async throws -> WebhookReport {
        guard secrets != nil else { throw WebhookAdminError.noSecretsKey }
        let secrets = secrets
        guard let endpoint = try await pool.withConnection({ try WebhookAdmin(connection: $0, secrets: secrets).endpoint(id: id) }) else {
            throw WebhookAdminError.notFound
        }
        guard !endpoint.secrets.isEmpty else { throw WebhookAdminError.noSecretsKey }
        return try await sendTest(endpoint)
    }
}
