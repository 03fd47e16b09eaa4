import Dispatch
import ServiceLifecycle
import Synchronization

/// An async HTTP client for callers on the Swift concurrency pool.
///
/// It owns `lanes` ``CurlEasy`` handles, each confined to its own serial `DispatchQueue`, so
/// blocking libcurl calls never run on the cooperative pool and each handle keeps its connection
/// alive between requests. Requests are spread over the lanes round-robin; at most `lanes`
/// transfers run at once and the rest wait in their lane's queue.
///
/// **Lifecycle.** It owns no thread (its lanes borrow libdispatch's), so it works without being
/// run; as a `Service` in a service group, the end of ``run()`` closes its kept-alive connections.
/// ``shutdown()`` does the same without one.
public final class HTTPClient: Service, Sendable {
    /// One handle and the only queue allowed to touch it.
    private final class Lane: @unchecked Sendable {
        // @unchecked: `easy` is not Sendable; it is only ever used inside `queue.async` blocks, and
        // the serial queue provides the exclusion libcurl requires.
        let queue: DispatchQueue
        /// nil once shut down: freeing the handle closes its connection.
        var easy: CurlEasy?

        init(index: Int, options: CurlOptions) throws {
            queue = DispatchQueue(label: "receiptq.curl.lane\(index)")
            easy = try CurlEasy(options: options)
        }
    }

    private let lanes: [Lane]
    private let next = Atomic<Int>(0)

    /// Creates the client and its handles up front, so option errors surface here.
    ///
    /// - Parameters:
    ///   - options: applied to every lane.
    ///   - lanes: how many handles (and so concurrent transfers and kept-alive connections); at least 1.
    /// - Throws: ``CurlError`` when a handle cannot be created.
    public init(options: CurlOptions, lanes: Int = 4) throws {
        self.lanes = try (0..<max(1, lanes)).map { try Lane(index: $0, options: options) }
    }

    /// Sends `request` on the next lane and suspends until the response or error.
    ///
    /// Cancellation is checked before the request is queued; once running, a transfer is bounded
    /// by ``CurlOptions/requestTimeout`` instead.
    ///
    /// - Throws: ``CurlError`` as ``CurlEasy/perform(_:)`` does, ``CurlError/Code/cancelled`` after
    ///   ``shutdown()``, or `CancellationError`.
    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        try Task.checkCancellation()
        let index = next.add(1, ordering: .relaxed).oldValue
        let lane = lanes[Int(UInt(bitPattern: index) % UInt(lanes.count))]
        return try await withCheckedThrowingContinuation { continuation in
            lane.queue.async {
                continuation.resume(
                    with: Result {
                        guard let easy = lane.easy else { throw CurlError(.cancelled, message: "the HTTP client is shut down") }
                        return try easy.perform(request)
                    })
            }
        }
    }

    /// Waits for graceful shutdown or cancellation, then ``shutdown()``.
    public func run() async throws {
        try? await gracefulShutdown()
        await shutdown()
    }

    /// Closes every lane's connection once the requests already queued on it have finished; later
    /// requests fail with ``CurlError/Code/cancelled``.
    public func shutdown() async {
        for lane in lanes {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                lane.queue.async {
                    lane.easy = nil
                    continuation.resume()
                }
            }
        }
    }
}
