import Foundation

/// The Redis primary's replicas as it reports them: what a failover now would lose, and whether
/// `REDIS_MIN_REPLICAS_ACK` can be met.
public struct ReplicationStatus: Sendable, Equatable {
    /// Replicas connected and online.
    public var replicas: Int
    /// The longest time since one of them acknowledged, in seconds (they do every second).
    public var lagSeconds: Int
    /// The most bytes of the replication stream one of them has not acknowledged.
    public var lagBytes: Int

    /// Creates a status.
    public init(replicas: Int = 0, lagSeconds: Int = 0, lagBytes: Int = 0) {
        self.replicas = replicas
        self.lagSeconds = lagSeconds
        self.lagBytes = lagBytes
    }
}
