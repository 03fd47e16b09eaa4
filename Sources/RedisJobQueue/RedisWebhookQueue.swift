import Foundation
import Hiredis
import ReceiptCore

/// The webhook dispatcher's Redis side: each delivery's job is queued once, guarded by a marker
/// that outlives the retry budget (a dispatcher that crashed between Redis and its Postgres commit
/// claims the delivery again; the marker makes that a no-op).
public final class RedisWebhookQueue: WebhookQueue {
    static let enqueueScript = """
        -- receiptq:webhook_enqueue:v1
        -- KEYS: webhook queue, then one marker per job; ARGV: marker TTL seconds, then the jobs
        for i = 2, #KEYS do
          if redis.call('SET', KEYS[i], '1', 'NX', 'EX', tonumber(ARGV[1])) then
            redis.call('LPUSH', KEYS[1], ARGV[i])
          end
        end
        return #KEYS - 1
        """

    private let connection: RedisConnection
    private let keys: RedisKeys
    private let markerTTL: Duration
    private let replication: ReplicaAcknowledgement?
    private var enqueuer = ScriptRunner(source: RedisWebhookQueue.enqueueScript)

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
        let markers = dispatches.map { keys.webhookMarker(deliveryID: $0.target.deliveryID) }
        let arguments: [[UInt8]] =
            ([keys.queue(JobKind.webhook.rawValue)] + markers).map(bytes) + [bytes(String(Int(markerTTL.seconds)))]
            + dispatches.map { $0.job(id: JobID.make(at: date), at: date).encoded() }
        _ = try enqueuer.run(on: connection, keyCount: markers.count + 1, arguments: arguments)
        try replication?.confirm(on: connection)
    }
}
