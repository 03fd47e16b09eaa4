import Dispatch

/// The serial queue a C handle is confined to, for the façades' one-owner-per-handle rule.
///
/// Blocking callers (worker threads) run work with ``sync(_:)``; async callers hop with
/// ``async(_:)`` so the cooperative pool never blocks on a socket. Work already running on the
/// queue (a pooled caller's closure calling back into the connection) runs inline instead of
/// deadlocking on `queue.sync`.
public struct ConfinedQueue: Sendable {
    private let queue: DispatchQueue
    private let key = DispatchSpecificKey<Bool>()

    /// Creates the queue, labelled for debuggers and crash reports.
    public init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: true)
    }

    /// Whether the caller is already running on this queue.
    public var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == true }

    /// Runs `body` on the queue and waits for it (inline when already on the queue).
    public func sync<T>(_ body: () throws -> T) rethrows -> T {
        if isCurrent { return try body() }
        return try queue.sync(execute: body)
    }

    /// Runs `body` on the queue and resumes the awaiting caller with its result.
    public func async<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let work = PendingWork(body)
        return try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: work.run()) }
        }
    }
}

/// Carries a closure into a dispatched block and drops it before the awaiting caller resumes.
///
/// Callers accept non-escaping bodies through `withoutActuallyEscaping`, which traps if the body
/// is still referenced when it returns. The dispatched block itself may be released only after the
/// continuation has resumed the caller, so it must not capture the body directly.
private final class PendingWork<T: Sendable>: @unchecked Sendable {
    // Touched only by the one dispatched block that calls `run()`.
    private var work: (@Sendable () throws -> T)?

    init(_ work: @escaping @Sendable () throws -> T) { self.work = work }

    func run() -> Result<T, any Error> {
        guard let work else { return .failure(CancellationError()) }
        self.work = nil
        return Result { try work() }
    }
}
