import BaseSupport
internal import CCurl
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

extension CurlMulti {
    /// The engine's fixed limits, validated by ``CurlMulti/init(options:maxConcurrent:maxHostConnections:)``.
    struct Limits {
        var maxConcurrent: Int
        var maxHostConnections: Int
    }

    /// One accepted request on its way to the engine thread.
    struct Submission: Sendable {
        let id: UInt64
        let request: HTTPRequest
        let completion: Completion
    }

    /// The part of a ``CurlMulti`` that any thread may touch: an inbox of requests and cancellations
    /// behind a mutex, the counters, and the means to start, wake and join the engine thread.
    /// Everything that touches libcurl lives in ``EngineLoop``, on the engine thread.
    final class Engine: Sendable {
        /// Where the engine is in its one life: not run yet, its thread running, or over.
        enum Phase {
            case idle
            case running
            case finished
        }

        /// Everything other threads share with the engine thread; only touched under `state`'s lock.
        struct State: ~Copyable {
            var accepting = true
            var phase = Phase.idle
            var pending = PendingQueue()
            /// Ids whose cancellation the engine has not seen yet.
            var cancellations: [UInt64] = []
            /// Set while the loop owns a live multi handle, cleared before `curl_multi_cleanup`.
            var wakeup: Wakeup? = nil
            /// A wakeup was sent that the loop has not yet answered by taking its inbox; saves one
            /// socketpair write per request when 1,000 arrive at once.
            var wakeupPending = false
            var stopDeadline: ContinuousClock.Instant? = nil
            var counters = Statistics()

            mutating func wake() {
                guard !wakeupPending, let wakeup else { return }
                wakeupPending = true
                wakeup.wake()
            }
        }

        let state = Mutex(State())
        private let nextID = Atomic<UInt64>(0)
        private let name: String
        private let options: CurlOptions
        private let limits: Limits
        /// Entered when the engine thread starts, left when it has torn everything down; a blocking
        /// `shutdown` waits on it.
        private let finished = DispatchGroup()
        /// Set by the engine thread, so it can recognise itself and never wait for itself.
        private let onEngineThread = EngineThreadMarker()

        init(name: String, options: CurlOptions, limits: Limits) {
            self.name = name
            self.options = options
            self.limits = limits
        }

        /// Runs the engine thread until shutdown has drained it. Returns at once when the engine
        /// already ran or was shut down before it could.
        ///
        /// - Throws: ``CurlError`` when libcurl cannot create or configure the multi handle; the
        ///   requests queued meanwhile fail with it.
        func run() async throws {
            let first = state.withLock { state in
                guard state.phase == .idle else { return false }
                state.phase = .running
                // Under the lock: a shutdown that sees `.running` must find the group entered.
                finished.enter()
                return true
            }
            guard first else { return }
            let startError: CurlError? = await withCheckedContinuation { continuation in
                // A thread of its own, not one of libdispatch's workers: the loop runs for the
                // engine's whole life, and a process with many engines (the tests start dozens)
                // would otherwise use up the pool libdispatch's queues share, and starve them.
                NamedThread.start(name) { [self] in
                    onEngineThread.markCurrent()
                    var startError: CurlError?
                    // The handles are created on the engine thread so that no other thread ever
                    // calls libcurl with them (the wakeup aside).
                    do {
                        try EngineLoop(engine: self, options: options, limits: limits).run()
                    } catch {
                        let failure = error as? CurlError ?? CurlError(.other, message: "curl_multi_init failed")
                        startError = failure
                        let queued = state.withLock { state in
                            state.accepting = false
                            return state.pending.removeAll()
                        }
                        for submission in queued { submission.completion(.failure(failure)) }
                    }
                    state.withLock { $0.phase = .finished }
                    finished.leave()
                    continuation.resume(returning: startError)
                }
            }
            if let startError { throw startError }
        }

        func makeID() -> UInt64 {
            nextID.add(1, ordering: .relaxed).newValue
        }

        /// Queues `request`, or fails it at once (on this thread) once shutdown has begun.
        func submit(_ request: HTTPRequest, id: UInt64, completion: @escaping Completion) {
            let accepted = state.withLock { state in
                guard state.accepting else { return false }
                state.pending.append(Submission(id: id, request: request, completion: completion))
                state.wake()
                return true
            }
            if !accepted {
                completion(.failure(Self.shutDownError))
            }
        }

        /// Asks the engine to cancel request `id` if it is still queued or in flight.
        func cancel(_ id: UInt64) {
            let unstarted = state.withLock { state -> Submission? in
                switch state.phase {
                case .idle:
                    // No thread yet to hand it to: fail the queued request here.
                    return state.pending.remove(id: id)
                case .running:
                    state.cancellations.append(id)
                    state.wake()
                    return nil
                case .finished:
                    return nil
                }
            }
            unstarted?.completion(.failure(Self.cancelledError))
        }

        /// Stops accepting, lets in-flight transfers run until `gracePeriod` has passed, and (when
        /// `wait` and not on the engine thread itself) waits for the engine thread to end. An engine
        /// that never ran fails what is queued here, since no thread will.
        func shutdown(gracePeriod: Duration, wait: Bool) {
            let unstarted = state.withLock { state -> [Submission]? in
                if state.accepting {
                    state.accepting = false
                    state.stopDeadline = .now + max(gracePeriod, .zero)
                }
                state.wake()
                guard state.phase == .idle else { return nil }
                state.phase = .finished
                return state.pending.removeAll()
            }
            if let unstarted {
                for submission in unstarted { submission.completion(.failure(Self.shutDownError)) }
            } else if wait, !onEngineThread.isCurrent {
                finished.wait()
            }
        }

        var statistics: Statistics {
            state.withLock { state in
                var counters = state.counters
                counters.queued = state.pending.count
                return counters
            }
        }

        static let shutDownError = CurlError(.cancelled, message: "the HTTP engine is shutting down")
        static let cancelledError = CurlError(.cancelled, message: "the request was cancelled")
    }

    /// The engine's eventfd, which its `epoll_wait` watches: writing to it wakes the engine thread.
    ///
    /// The engine clears its copy under the lock before closing the descriptor, and every `wake()`
    /// runs under that lock too, so it never writes to a closed (or reused) descriptor.
    struct Wakeup: Sendable {
        let fd: Int32

        func wake() {
            var one: UInt64 = 1
            // Only fails when the counter is about to overflow, which already means "wake up".
            _ = write(fd, &one, MemoryLayout<UInt64>.size)
        }
    }

    /// Recognises the engine thread (it marks itself first thing), so a completion that shuts the
    /// engine down does not wait for its own thread.
    final class EngineThreadMarker: Sendable {
        private let thread = Mutex<pthread_t?>(nil)

        func markCurrent() {
            thread.withLock { $0 = pthread_self() }
        }

        var isCurrent: Bool {
            thread.withLock { engine in engine.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
        }
    }

    /// A FIFO of submissions that also supports removing one by id (a cancelled request): removal
    /// leaves a hole that `popFirst` skips, and the storage is compacted as the head advances.
    struct PendingQueue {
        private var slots: [Submission?] = []
        private var head = 0
        private(set) var count = 0

        mutating func append(_ submission: Submission) {
            slots.append(submission)
            count += 1
        }

        mutating func popFirst() -> Submission? {
            while head < slots.count {
                let submission = slots[head]
                slots[head] = nil
                head += 1
                if let submission {
                    count -= 1
                    compactIfNeeded()
                    return submission
                }
            }
            compactIfNeeded()
            return nil
        }

        mutating func remove(id: UInt64) -> Submission? {
            guard let index = slots[head...].firstIndex(where: { $0?.id == id }), let submission = slots[index] else {
                return nil
            }
            slots[index] = nil
            count -= 1
            return submission
        }

        mutating func removeAll() -> [Submission] {
            let all = slots[head...].compactMap { $0 }
            self = PendingQueue()
            return all
        }

        // Amortised O(1): the consumed prefix is dropped once it is at least half the storage.
        private mutating func compactIfNeeded() {
            if head == slots.count {
                slots.removeAll(keepingCapacity: slots.count <= 4096)
                head = 0
            } else if head >= 1024, head * 2 >= slots.count {
                slots.removeFirst(head)
                head = 0
            }
        }
    }
}
