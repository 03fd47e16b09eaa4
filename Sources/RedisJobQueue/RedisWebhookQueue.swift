import Foundation
import Hiredis
import ReceiptCore

/// The webhook dispatcher's Redis side: each delivery's job is queued once, guarded by a marker
/// that outlives the retry budget (a dispatcher that crashed between Redis and its Postgres commit
/// claims the delivery again; the marker makes that a no-op) and is kept alive while the delivery
/// is queued; a marker gone means the job went with it, and the delivery is queued again.
public final class RedisWebhookQueue: WebhookQueue {
    private let connection: RedisConnection
    private let keys: RedisKeys
    private let markerTTL: Duration
    private let replication: ReplicaAcknowledgement?

    /// Creates the queue on the dispatcher's own connection.
    /// - Parameters:
    ///   - markerTTL: how long a queued delivery is remembered (default 4 days: longer than the
    ///     3-day retry budget).
    ///   - replication: replicas that must hold each enqueue before the outbox marks its
    ///     deliveries queued (a lost job would otherwise never be delivered).
    public init(
        connection: RedisConnection, keys: RedisKeys, markerTTL: Duration = .seconds(4 * 86_400), replication: ReplicaAcknowledgement? = nil
    ) {
        self.connection = connection
        self.keys = keys
        self.markerTTL = markerTTL
        self.replication = replication
    }

    public func enqueue(_ dispatches: [WebhookDispatch], at date: Date) throws {
        guard !dispatches.isEmpty else { return }
        _ = try run(RedisScripts.webhookEnqueue, dispatches, at: date)
        try replication?.confirm(on: connection)
    }

    public func requeueLost(_ dispatches: [WebhookDispatch], at date: Date) throws -> Int {
        guard !dispatches.isEmpty else { return 0 }
        let requeued = try run(RedisScripts.webhookRequeue, dispatches, at: date).int ?? 0
        try replication?.confirm(on: connection)
        return requeued
    }

    /// Runs either script, which take the same keys and arguments: the queue and each delivery's
    /// marker; the marker TTL, then the jobs.
    private func run(_ script: RedisScript, _ dispatches: [WebhookDispatch], at date: Date) throws -> RedisValue {
        let markers = dispatches.map { keys.webhookMarker(deliveryID: $0.target.deliveryID) }
        let arguments =
            [bytes(String(Int(markerTTL.seconds)))] + dispatches.map { $0.job(id: JobID.make(at: date), at: date).encoded() }
        return try RedisScriptRunner.run(script, keys: [keys.queue(JobKind.webhook.rawValue)] + markers, arguments: arguments, on: connection)
    }
}
