import Foundation
import Libpq
import ReceiptCore

// The same connection serves the worker's other port: a delivery's endpoint and its outcomes.
extension PostgresReceiptStore: DeliveryLog {
    public func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord? {
        // Briefly cached: a pause or a rotation reaches every worker within seconds.
        if let cached = endpoints[id], Date().timeIntervalSince(cached.loadedAt) < endpointCacheTTL { return cached.record }
        let record = try WebhookRows.endpoint(id: id, secrets: secrets, on: connection)
        // Not an endpoint whose secret cannot be opened: its deliveries are buried, and the
        // operator's fix (a rotation) must hold for the retry that follows at once.
        if record?.secrets.isEmpty != true { endpoints[id] = (record, Date()) }
        return record
    }

    public func record(_ outcomes: [DeliveryOutcome]) throws {
        guard !outcomes.isEmpty else { return }
        try connection.transaction { connection in try WebhookRows.record(outcomes, on: connection) }
    }
}
