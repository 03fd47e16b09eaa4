import Synchronization

/// A fixed-size set of resources (connections) lent to one async caller at a time.
///
/// Resources are made on first demand; when all are lent, callers wait without blocking a thread
/// until one comes back. The Redis and Postgres façades both pool their connections with it.
///
/// ```swift
/// let pool = LeasePool<Connection>(size: 4, make: { index in Connection(label: "pool-\(index)") },
///                                  close: { $0.close() }, closedError: { MyError.closed })
/// let connection = try await pool.acquire()
/// defer { pool.release(connection) }
/// ```
public final class LeasePool<Resource: AnyObject & Sendable>: Sendable {
    private struct Waiter {
        var id: UInt64
        var continuation: CheckedContinuation<Resource, any Error>
    }

    private struct State {
        var idle: [Resource] = []
        var created = 0
        var waiters: [Waiter] = []
        var nextWaiterID: UInt64 = 0
        var isClosed = false
    }

    private let size: Int
    private let make: @Sendable (Int) -> Resource
    private let closeResource: @Sendable (Resource) -> Void
    private let closedError: @Sendable () -> any Error
    private let state = Mutex(State())

    /// Creates a pool; nothing is made until a caller needs it.
    ///
    /// - Parameters:
    ///   - size: The most resources at once; at least 1.
    ///   - make: Makes resource number `n` (1-based); must not block (connect lazily).
    ///   - close: Closes a resource when the pool is closed.
    ///   - closedError: What waiting and later callers get once the pool is closed.
    public init(
        size: Int, make: @escaping @Sendable (Int) -> Resource, close: @escaping @Sendable (Resource) -> Void,
        closedError: @escaping @Sendable () -> any Error
    ) {
        self.size = max(1, size)
        self.make = make
        self.closeResource = close
        self.closedError = closedError
    }

    /// How many callers are waiting for a resource (all of them lent); for tests and metrics.
    public var waiting: Int { state.withLock { $0.waiters.count } }

    /// Closes idle resources now and lent ones when they are released; waiting and later
    /// callers get `closedError()`. Idempotent.
    public func close() {
        let (idle, waiters) = state.withLock { state -> ([Resource], [Waiter]) in
            state.isClosed = true
            defer {
                state.idle = []
                state.waiters = []
            }
            return (state.idle, state.waiters)
        }
        for waiter in waiters { waiter.continuation.resume(throwing: closedError()) }
        for connection in idle { closeResource(connection) }
    }

    private enum Acquired {
        case connection(Resource)
        case failure(any Error)
        case waiting
    }

    /// Borrows a resource, waiting until one is free; give it back with ``release(_:)``.
    /// - Throws: `closedError()` when the pool is closed, `CancellationError` when cancelled while waiting.
    public func acquire() async throws -> Resource {
        let id = state.withLock { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Resource, any Error>) in
                let acquired = state.withLock { state -> Acquired in
                    if state.isClosed { return .failure(closedError()) }
                    if let connection = state.idle.popLast() { return .connection(connection) }
                    if state.created < size {
                        state.created += 1
                        return .connection(make(state.created))
                    }
                    // Checked under the lock: the cancellation handler takes the same lock, so
                    // either it sees this waiter or this sees the cancellation.
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return .waiting
                }
                switch acquired {
                case .connection(let connection): continuation.resume(returning: connection)
                case .failure(let error): continuation.resume(throwing: error)
                case .waiting: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Returns a borrowed resource (or closes it, when the pool was closed meanwhile).
    public func release(_ connection: Resource) {
        let (waiter, closeIt) = state.withLock { state -> (Waiter?, Bool) in
            if state.isClosed { return (nil, true) }
            if !state.waiters.isEmpty { return (state.waiters.removeFirst(), false) }
            state.idle.append(connection)
            return (nil, false)
        }
        if closeIt { closeResource(connection) }
        waiter?.continuation.resume(returning: connection)
    }
}
