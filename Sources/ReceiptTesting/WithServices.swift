import Logging
import ServiceLifecycle

/// Runs `services` in a service group (in order; stopped in reverse) while `body` runs, then shuts
/// the group down gracefully and waits for it: how a test uses a client whose threads start in
/// `run()`, as the app's service groups run it.
///
/// ```swift
/// let client = AppStoreClient(configuration: configuration)
/// let report = try await withServices([client]) { await client.verify(request) }
/// ```
///
/// - Throws: what `body` throws, or else what a service threw.
public func withServices<T>(_ services: [any Service], _ body: () async throws -> T) async throws -> T {
    let group = ServiceGroup(services: services, logger: Logger(label: "receiptq.tests", factory: { _ in SwiftLogNoOpLogHandler() }))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        let result: Result<T, any Error>
        do {
            result = .success(try await body())
        } catch {
            result = .failure(error)
        }
        await group.triggerGracefulShutdown()
        var stopError: (any Error)?
        do {
            try await tasks.waitForAll()
        } catch {
            stopError = error
        }
        // The body's error first: a service that failed is most likely why the body did.
        let value = try result.get()
        if let stopError { throw stopError }
        return value
    }
}
