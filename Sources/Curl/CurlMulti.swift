import ServiceLifecycle

/// An asynchronous HTTP engine: many concurrent transfers on one libcurl multi handle, driven by
/// one dedicated thread, so 1,000 requests in flight cost one thread and 1,000 sockets rather than
/// 1,000 threads blocked in ``CurlEasy/perform(_:)``.
///
/// ```swift
/// let engine = CurlMulti(options: options, maxConcurrent: 1000)
/// // In a ServiceGroup, listed before the services that send on it (they stop first):
/// let group = ServiceGroup(services: [engine, worker], gracefulShutdownSignals: [.sigterm], logger: logger)
/// engine.send(request) { result in /* runs on the engine thread: hand off, don't block */ }
/// let response = try await engine.send(request)
/// ```
///
/// **Lifecycle.** A `Service`: `init` starts nothing; ``run()`` starts the engine thread and returns
/// once it has ended, which graceful shutdown, cancellation or ``shutdown(gracePeriod:)`` brings
/// about. Requests sent before ``run()`` wait in the engine's queue until it starts.
///
/// **Threading.** The `CURLM *` and every easy handle are created, used and freed on the engine
/// thread only (a thread of its own, named `receiptq.curl` unless told otherwise). Other threads
/// talk to it through a mutex-protected inbox and an eventfd wakeup, so new work is noticed at once
/// instead of at the next poll timeout.
///
/// **Capacity.** At most `maxConcurrent` transfers are inside libcurl at once; further requests wait
/// in the engine's in-memory queue, which is unbounded: its size is whatever the caller submits, so
/// callers bound it themselves (the worker does, with `worker.concurrency`). Finished easy handles go
/// back to a free list of at most `maxConcurrent` handles and are reused, so a steady load creates no
/// handles; each idle handle keeps about 20–30 KiB (libcurl's receive buffer) but no request state.
/// Each transfer's header list, copied body and response buffers live exactly as long as the
/// transfer. Connections stay in the multi handle's cache and are reused across transfers.
///
/// **Sockets.** Over HTTP/1.1 every in-flight transfer needs its own connection, so the process needs
/// a file-descriptor limit (`ulimit -n`) comfortably above `maxConcurrent`.
///
/// **Security.** The same rules as ``CurlEasy``, applied by the same code: `http`/`https` only, no
/// redirects, TLS peer and host verification always on, `Expect:` suppressed, CR/LF in headers
/// refused, bodies capped at ``CurlOptions/maxResponseBytes``, and per-request connect and total
/// timeouts from ``CurlOptions``.
public final class CurlMulti: Service, Sendable {
    /// What a callback-style ``send(_:completion:)`` receives: the response (any HTTP status) or the
    /// transfer's error.
    public typealias Completion = @Sendable (Result<HTTPResponse, CurlError>) -> Void

    /// A snapshot of the engine's counters, for metrics and tests.
    public struct Statistics: Sendable, Equatable {
        /// Transfers inside libcurl: running, or waiting there for a connection (see ``CurlMulti/init(options:maxConcurrent:maxHostConnections:)``).
        public var inFlight = 0
        /// Requests accepted but waiting in the engine because `maxConcurrent` transfers are in flight.
        public var queued = 0
        /// Requests whose completion has been called, with a response or an error.
        public var completed = 0
        /// Of ``completed``, how many ended with a ``CurlError`` (cancellations included).
        public var failed = 0
        /// New connections opened by finished transfers (the sum of `CURLINFO_NUM_CONNECTS`); it
        /// stays far below ``completed`` while connections are reused. A cancelled transfer's
        /// connection is closed and not counted.
        public var connectionsOpened = 0
        /// Easy handles created so far; at most the peak concurrency, because handles are reused.
        public var handlesCreated = 0

        /// Creates a snapshot; the engine fills in its own.
        public init() {}
    }

    private let engine: Engine

    /// Configures the engine; its thread and multi handle are made by ``run()``.
    ///
    /// - Parameters:
    ///   - options: applied to every transfer. ``CurlOptions/requestTimeout`` runs from the moment a
    ///     transfer enters libcurl, so it includes any wait there for a free connection (libcurl 7.88
    ///     then fails it with ``CurlError/Code/timeout`` as soon as the wait ends), but not the wait
    ///     in the engine's own queue.
    ///   - maxConcurrent: transfers inside libcurl at once (at least 1); also the connection cache
    ///     size (`CURLMOPT_MAXCONNECTS`), the total connection limit and the free-list bound.
    ///   - maxHostConnections: connections to one host (`CURLMOPT_MAX_HOST_CONNECTIONS`), capped at
    ///     `maxConcurrent`. An HTTP/1.1 connection carries one transfer at a time, so beyond this many
    ///     the extra transfers wait inside libcurl for a free connection; for full HTTP/1.1
    ///     concurrency pass `maxConcurrent`. Over HTTP/2 (``CurlOptions/HTTPVersion/http2TLS``) each
    ///     connection multiplexes up to 100 streams, yet libcurl 7.88 spreads a burst over up to this
    ///     many connections, so 10–20 is plenty there.
    ///   - name: the engine thread's name (Linux keeps 15 bytes), so a process with several engines
    ///     shows which is which.
    public init(options: CurlOptions, maxConcurrent: Int = 1000, maxHostConnections: Int = 100, name: String = "receiptq.curl") {
        let maxConcurrent = max(1, maxConcurrent)
        engine = Engine(
            name: name, options: options,
            limits: Limits(maxConcurrent: maxConcurrent, maxHostConnections: min(max(1, maxHostConnections), maxConcurrent)))
    }

    // An engine that never ran fails what was queued; one that ran has ended, since run() keeps
    // its engine alive until then.
    deinit {
        engine.shutdown(gracePeriod: .zero, wait: true)
    }

    /// Starts the engine thread and drives transfers on it until graceful shutdown, cancellation or
    /// ``shutdown(gracePeriod:)``; returns once the thread has ended, every handle is freed and every
    /// socket closed. Returns at once if the engine already ran or was shut down.
    ///
    /// Graceful shutdown and cancellation cancel whatever is still in flight (as
    /// ``shutdown(gracePeriod:)`` with `.zero`): in a service group the services sending on the
    /// engine come after it, so they have stopped by then and nobody waits for those answers.
    ///
    /// - Throws: ``CurlError`` when libcurl cannot create or configure the multi handle; requests
    ///   sent meanwhile fail with it.
    public func run() async throws {
        let engine = self.engine
        try await withTaskCancellationOrGracefulShutdownHandler {
            try await engine.run()
        } onCancelOrGracefulShutdown: {
            engine.shutdown(gracePeriod: .zero, wait: false)
        }
    }

    /// Sends `request` and calls `completion` exactly once with its outcome.
    ///
    /// `completion` runs **on the engine thread**, which drives every other transfer: it must return
    /// quickly and never block (no waiting on semaphores, locks held elsewhere or I/O); hand real work
    /// to another queue. It may call ``send(_:completion:)`` again. After ``shutdown(gracePeriod:)``
    /// has begun, `completion` is called at once, on the caller's thread, with
    /// ``CurlError/Code/cancelled``.
    ///
    /// - Parameters:
    ///   - request: an `http://` or `https://` request; it is validated on the engine thread, so a
    ///     bad method or CR/LF in a header arrives as ``CurlError/Code/invalidRequest``.
    ///   - completion: receives the response (any HTTP status) or the ``CurlError``.
    public func send(_ request: HTTPRequest, completion: @escaping Completion) {
        engine.submit(request, id: engine.makeID(), completion: completion)
    }

    /// Sends `request` and suspends until the response arrives; the calling task never blocks a thread.
    ///
    /// Cancelling the task aborts the transfer (or removes it from the queue) promptly.
    ///
    /// - Throws: ``CurlError`` as ``CurlEasy/perform(_:)`` does; ``CurlError/Code/cancelled`` when the
    ///   task was cancelled or the engine shut down; `CancellationError` when the task was already
    ///   cancelled before the request was queued.
    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        try Task.checkCancellation()
        let engine = self.engine
        let id = engine.makeID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPResponse, any Error>) in
                engine.submit(request, id: id) { continuation.resume(with: $0) }
                // The cancellation handler may have run before the request was queued, when there
                // was nothing to cancel yet; the flag it set is still visible here.
                if Task.isCancelled {
                    engine.cancel(id)
                }
            }
        } onCancel: {
            engine.cancel(id)
        }
    }

    /// Stops accepting requests, fails the queued ones with ``CurlError/Code/cancelled``, gives the
    /// in-flight ones `gracePeriod` to finish, cancels whatever is still running after that (also
    /// with ``CurlError/Code/cancelled``), frees every handle and waits for the engine thread to end
    /// (and ``run()`` with it).
    ///
    /// Every completion has been called when this returns. The wait is at most `gracePeriod` plus a
    /// few milliseconds, so from async code prefer a short grace period or call it off the
    /// cooperative pool. Called from a completion (on the engine thread) it does not wait, since the
    /// engine cannot finish while that completion runs. Later calls do nothing but wait; only the
    /// first call's `gracePeriod` counts. Before ``run()`` it fails what is queued, and a later
    /// ``run()`` returns at once.
    ///
    /// - Parameter gracePeriod: how long in-flight transfers may keep running; `.zero` (the default)
    ///   cancels them at once.
    public func shutdown(gracePeriod: Duration = .zero) {
        engine.shutdown(gracePeriod: gracePeriod, wait: true)
    }

    /// The engine's counters right now.
    public var statistics: Statistics {
        engine.statistics
    }
}
