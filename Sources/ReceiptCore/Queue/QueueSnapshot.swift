import Foundation

/// The queues at a glance: what the dashboard's overview and `/admin/api/overview` show.
public struct QueueSnapshot: Sendable, Equatable {
    /// Ready jobs per queue (`validate`, `repoll`).
    public var queued: [JobKind: Int]
    /// Bulk imports' validations waiting in the import queue (served with spare capacity only).
    public var importQueued: Int
    /// Bulk imports active in the last day, the most recent first (running ones and those just finished).
    public var imports: [ImportRun]
    public var retries: Int
    public var dead: Int
    /// Live worker lanes (their heartbeat has not lapsed).
    public var workers: [WorkerStatus]
    /// Apple outage mode, shared by every worker.
    public var circuit: CircuitSnapshot
    /// The last hour, one entry per minute, oldest first (minutes without jobs count zero).
    public var activity: [ActivityMinute]
    /// Where Apple's `verifyReceipt` stands: gone, or the deprecation and sunset it announced.
    public var verifyReceipt: VerifyReceiptLifecycle
    /// How the Redis primary's replicas keep up (no replicas: zeros).
    public var replication: ReplicationStatus

    /// Creates a snapshot.
    public init(
        queued: [JobKind: Int], retries: Int, dead: Int, workers: [WorkerStatus],
        circuit: CircuitSnapshot = CircuitSnapshot(status: .closed), activity: [ActivityMinute] = [],
        verifyReceipt: VerifyReceiptLifecycle = VerifyReceiptLifecycle(), importQueued: Int = 0, imports: [ImportRun] = [],
        replication: ReplicationStatus = ReplicationStatus()
    ) {
        self.replication = replication
        self.importQueued = importQueued
        self.imports = imports
        self.verifyReceipt = verifyReceipt
        self.queued = queued
        self.retries = retries
        self.dead = dead
        self.workers = workers
        self.circuit = circuit
        self.activity = activity
    }
}
