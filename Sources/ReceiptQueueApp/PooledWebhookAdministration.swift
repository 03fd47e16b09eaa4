import Curl
import Dispatch
import Foundation
import Libpq
import OpenSSL
import PostgresStore
import ReceiptCore
import WebhookClient

/// The dashboard's and the admin API's webhook administration: `WebhookAdmin` on the API's
/// Postgres pool, the same early address check as `receiptq webhooks add`, and test deliveries.
final class PooledWebhookAdministration: WebhookAdministration {
    private let pool: PostgresConnectionPool
    private let secrets: SecretBox?
    private let client: WebhookClient.Configuration

    /// The resolver's blocking look-ups run here, off the request's executor.
    private static let resolver = DispatchQueue(label: "receiptq.webhooks.resolve")

    init(pool: PostgresConnectionPool, secrets: SecretBox?, client: WebhookClient.Configuration) {
        self.pool = pool
        self.secrets = secrets
        self.client = client
    }

    func endpoints(appID: UUID?) async throws -> [WebhookEndpointSummary] {
        let secrets = secrets
        return try await pool.withConnection { try WebhookAdmin(connection: $0, secrets: secrets).list(appID: appID) }
    }

    func add(
        appID: UUID, url: String, eventTypes: [String], allowPrivate: Bool, description: String?, audit: AuditAction
    ) async throws -> (id: UUID, secret: String) {
        let components = try WebhookAdmin.validate(url: url, allowPrivate: allowPrivate)
        if !allowPrivate, let host = components.host {
            let onlyPrivate = await withCheckedContinuation { continuation in
                Self.resolver.async { continuation.resume(returning: PublicAddressPolicy.resolvesOnlyPrivately(host)) }
            }
            if onlyPrivate { throw WebhookAdminError.privateAddress }
        }
        let secrets = secrets
        return try await pool.withConnection { connection in
            try WebhookAdmin(connection: connection, secrets: secrets).add(
                appID: appID, url: url, eventTypes: eventTypes, allowPrivate: allowPrivate, description: description, audit: audit)
        }
    }

    func remove(id: UUID, audit: AuditAction) async throws {
        try await pool.withConnection { try WebhookAdmin(connection: $0, secrets: nil).remove(id: id, audit: audit) }
    }

    func rotateSecret(id: UUID, overlap: TimeInterval, audit: AuditAction) async throws -> String {
        let secrets = secrets
        return try await pool.withConnection {
            try WebhookAdmin(connection: $0, secrets: secrets).rotateSecret(id: id, overlap: overlap, audit: audit)
        }
    }

    func setPaused(id: UUID, _ paused: Bool, audit: AuditAction) async throws {
        try await pool.withConnection { try WebhookAdmin(connection: $0, secrets: nil).setPaused(id: id, paused, audit: audit) }
    }

    func test(id: UUID) async throws -> WebhookReport {
        guard secrets != nil else { throw WebhookAdminError.noSecretsKey }
        let secrets = secrets
        guard let endpoint = try await pool.withConnection({ try WebhookAdmin(connection: $0, secrets: secrets).endpoint(id: id) }) else {
            throw WebhookAdminError.notFound
        }
        guard !endpoint.secrets.isEmpty else { throw WebhookAdminError.noSecretsKey }
        return try await WebhookClient.sendTest(to: endpoint, origin: "the receiptq dashboard", configuration: client)
    }
}
