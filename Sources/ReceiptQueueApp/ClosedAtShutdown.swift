import ServiceLifecycle

/// Resources a role holds for its whole life (the API's connection pools), closed when its group
/// shuts down gracefully or is cancelled: as a `Service` of the group, listed before the services
/// that use them, so that it is told to stop after they have stopped.
public struct ClosedAtShutdown: Service {
    private let close: @Sendable () -> Void

    /// - Parameter close: closes the resources; called once, at graceful shutdown or cancellation.
    public init(_ close: @escaping @Sendable () -> Void) {
        self.close = close
    }

    /// Waits for graceful shutdown or cancellation, then closes.
    public func run() async throws {
        // Thrown on cancellation only: the resources are closed either way.
        try? await gracefulShutdown()
        close()
    }
}
