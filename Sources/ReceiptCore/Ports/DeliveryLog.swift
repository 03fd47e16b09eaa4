import Foundation

/// The worker's side of webhook deliveries in Postgres: the endpoint a delivery sends to, and what
/// each attempt leaves (blocking, like ``ReceiptStore``; one instance per thread).
public protocol DeliveryLog: AnyObject {
    /// The webhook endpoint a delivery job sends to, or nil when it was removed.
    func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord?
    /// Records how delivery attempts went, in one transaction and idempotently: a delivered row
    /// stays delivered whatever a replayed attempt says.
    /// - Throws: when the database is unreachable or refuses: nothing is known to be recorded.
    func record(_ outcomes: [DeliveryOutcome]) throws
}
