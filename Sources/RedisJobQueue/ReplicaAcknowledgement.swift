import Hiredis
import ReceiptCore

/// Replicas that must hold a write before it counts as done (`WAIT`), so that a failover to one
/// of them loses nothing that was acknowledged.
///
/// Used where a lost write would lose work rather than repeat it: the intakes' enqueues (a 2xx
/// promises the job), and the scheduler's re-poll and webhook enqueues (Postgres marks their rows
/// queued in the same transaction). A worker's settlement needs none: losing it leaves the job in
/// the processing list, and the job runs again (a repeat, stored once).
public struct ReplicaAcknowledgement: Sendable {
    /// `REDIS_MIN_REPLICAS_ACK`: 0 sends no `WAIT`.
    public var replicas: Int
    /// How long one `WAIT` lasts before the write counts as not acknowledged.
    public var timeout: Duration
    /// Called on each `WAIT` whose replicas did not acknowledge in time (a metric).
    public var onTimeout: @Sendable () -> Void

    /// Creates the requirement.
    public init(replicas: Int, timeout: Duration, onTimeout: @escaping @Sendable () -> Void = {}) {
        self.replicas = max(0, replicas)
        self.timeout = timeout
        self.onTimeout = onTimeout
    }

    /// `WAIT replicas timeout-ms`: it covers every write the connection made before it.
    var command: [[UInt8]] {
        ["WAIT", String(replicas), String(max(1, Int(timeout.seconds * 1000)))].map { Array($0.utf8) }
    }

    /// Throws (and counts) unless `reply`, a `WAIT`'s, says enough replicas acknowledged.
    func check(_ reply: RedisValue?) throws {
        let acknowledged = reply?.int ?? 0
        guard acknowledged < replicas else { return }
        onTimeout()
        throw RedisQueueError(code: .replicationTimeout, message: "\(acknowledged) of \(replicas) replicas acknowledged within \(timeout)")
    }

    /// Sends `WAIT` on `connection` after its writes (blocking) unless no replica is required.
    func confirm(on connection: RedisConnection) throws {
        guard replicas > 0 else { return }
        try check(try connection.send(bytes: command))
    }
}
