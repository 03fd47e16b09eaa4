import Foundation

/// One live worker lane, from its heartbeat.
public struct WorkerStatus: Sendable, Equatable {
    public var id: String
    public var host: String?
    public var pid: Int?
    /// Jobs in flight in the lane's process at its last heartbeat.
    public var busy: Int?
    public var startedAt: Date?
    public var lastHeartbeatAt: Date?
    /// Jobs in the lane's processing list now.
    public var processing: Int

    /// Creates a status.
    public init(
        id: String, host: String?, pid: Int?, busy: Int?, startedAt: Date?, lastHeartbeatAt: Date?, processing: Int
    ) {
        self.id = id
        self.host = host
        self.pid = pid
        self.busy = busy
        self.startedAt = startedAt
        self.lastHeartbeatAt = lastHeartbeatAt
        self.processing = processing
    }
}
