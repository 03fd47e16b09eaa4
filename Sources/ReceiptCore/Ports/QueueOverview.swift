import Foundation

/// Reads a ``QueueSnapshot`` (async: the dashboard's handlers call it).
public protocol QueueOverview: Sendable {
    /// The queues, sets and live workers now.
    func snapshot() async throws -> QueueSnapshot
}
