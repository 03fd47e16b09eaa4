import Foundation
import Hiredis
import ReceiptCore

/// The webhook dispatcher's Redis side: each delivery's job is queued once, guarded by a marker
/// that outlives the retry budget (a dispatcher that crashed between Redis and its Postgres commit
/// claims the delivery again; the marker makes that a no-op) and is kept alive while the delivery
/// is queued; a marker gone means the job went with it, and the delivery is queued again.
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

    /// A marker's absence means the job went with it (the two are written by one script, and
    /// replicated together): queue it again. A marker present is kept alive instead.
    static let requeueScript = """
        -- receiptq:webhook_requeue:v1
        -- KEYS: webhook queue, then one marker per job; ARGV: marker TTL seconds, then the jobs
        local requeued = 0
        for i = 2, #KEYS do
          if redis.call('EXPIRE', KEYS[i], tonumber(ARGV[1])) == 0 then
            redis.call('SET', KEYS[i], '1', 'EX', tonumber(ARGV[1]))
            redis.call('LPUSH', KEYS[1], ARGV[i])
            requeued = requeued + 1
          end
        end
        return requeued
        """

    private let connection: RedisConnection
    private let keys: RedisKeys
    private let markerTTL: Duration
    private let replication: ReplicaAcknowledgement?
    private var enqueuer = ScriptRunner(source: RedisWebhookQueue.enqueueScript)
    private var requeuer = ScriptRunner(source: RedisWebhookQueue.requeueScript)

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
        _ = try enqueuer.run(on: connection, keyCount: dispatches.count + 1, arguments: arguments(dispatches, at: date))
        try replication?.confirm(on: connection)
    }

    public func requeueLost(_ dispatches: [WebhookDispatch], at date: Date) throws -> Int {
        guard !dispatches.isEmpty else { return 0 }
        let requeued = try requeuer.run(on: connection, keyCount: dispatches.count + 1, arguments: arguments(dispatches, at: date)).int ?? 0
        try replication?.confirm(on: connection)
        return requeued
    }

    /// Both scripts' keys and arguments: the queue and each delivery's marker, the marker TTL, the jobs.
    private func arguments(_ dispatches: [WebhookDispatch], at date: Date) -> [[UInt8]] {
        let markers = dispatches.map { keys.webhookMarker(deliveryID: $0.target.deliveryID) }
        return ([keys.queue(JobKind.webhook.rawValue)] + markers).map(bytes) + [bytes(String(Int(markerTTL.seconds)))]
            + dispatches.map { $0.job(id: JobID.make(at: date), at: date).encoded() }
    }
}
