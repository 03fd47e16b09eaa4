import Curl
import Foundation
import PostgresStore
import ReceiptCore
import WebhookClient

extension ReceiptQueueApp.Admin {
    var webhooks: WebhookAdmin { WebhookAdmin(connection: connection, secrets: secrets) }

    /// Checks an endpoint URL before it is registered, and looks its host up.
    /// - Returns: the host when it resolves to loopback, private or link-local addresses only and
    ///   `allowPrivate` is false (the caller refuses it, saying so); nil otherwise.
    /// - Throws: ``WebhookAdminError`` for a URL that cannot be an endpoint.
    public func privateWebhookHost(url: String, allowPrivate: Bool) throws -> String? {
        let components = try WebhookAdmin.validate(url: url, allowPrivate: allowPrivate)
        guard !allowPrivate, let host = components.host, PublicAddressPolicy.resolvesOnlyPrivately(host) else { return nil }
        return host
    }

    /// Registers an endpoint; returns it and its signing secret (shown once).
    /// - Parameter eventTypes: types or families (`subscription.*`); empty for every event.
    /// - Throws: ``WebhookAdminError``.
    public func addWebhook(
        appID: UUID, url: String, eventTypes: [String] = [], allowPrivate: Bool, description: String?, audit: AuditAction
    ) throws -> (id: UUID, secret: String) {
        try webhooks.add(appID: appID, url: url, eventTypes: eventTypes, allowPrivate: allowPrivate, description: description, audit: audit)
    }

    /// Every endpoint (of one app, when given), oldest first, with its delivery counts.
    public func listWebhooks(appID: UUID?) throws -> [WebhookEndpointSummary] { try webhooks.list(appID: appID) }

    /// Removes an endpoint and its undelivered deliveries.
    public func removeWebhook(id: UUID, audit: AuditAction) throws { try webhooks.remove(id: id, audit: audit) }

    /// Issues a new signing secret; the old one keeps signing for `overlap`.
    public func rotateWebhookSecret(id: UUID, overlap: TimeInterval, audit: AuditAction) throws -> String {
        try webhooks.rotateSecret(id: id, overlap: overlap, audit: audit)
    }

    /// Pauses or resumes deliveries to an endpoint.
    public func setWebhookPaused(id: UUID, _ paused: Bool, audit: AuditAction) throws {
        try webhooks.setPaused(id: id, paused, audit: audit)
    }

    /// The endpoint with its secrets opened (empty when `RECEIPTQ_SECRETS_KEY` cannot open them).
    public func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord? { try webhooks.endpoint(id: id) }

    /// Sends one signed `webhook.test` delivery to `endpoint` now; nothing is stored.
    public func sendTestWebhook(to endpoint: WebhookEndpointRecord) async throws -> WebhookReport {
        try await WebhookClient.sendTest(to: endpoint, origin: "`receiptq webhooks test`", configuration: configuration.webhooks.client)
    }
}
