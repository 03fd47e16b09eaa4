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
    /// behind a mutex, the counters, and the means to wake and to join the engine thread. Everything
    /// that touches libcurl lives in ``EngineLoop``, on the engine thread.
    final class Engine: Sendable {
        /// Everything other threads share with the engine thread; only touched under `state`'s lock.
        struct State: ~Copyable {
            var accepting = true
            var pending = PendingQueue()
            /// Ids whose cancellation the engine has not seen yet.
            var cancellations: [UInt64] = []
            /// Set while the loop owns a live multi handle, cleared before `curl_multi_cleanup`.
            var wakeup: Wakeup? = nil
            /// A wakeup was sent that the loop has not yet answered by taking its inbox; saves one
            /// socketpair write per request when 1,000 arrive at once.
            var wakeupPending = false
            var stopDeadline: ContinuousClock.Instant? = nil
            var startError: CurlError? = nil
            var counters = Statistics()

            mutating func wake() {
                guard !wakeupPending, let wakeup else { return }
                wakeupPending = true
                wakeup.wake()
            }
        }

        let state = Mutex(State())
        private let nextID = Atomic<UInt64>(0)
        private let label: String
        /// Left when the engine thread has torn everything down; `shutdown` waits on it.
        private let finished = DispatchGroup()
        /// Set by the engine thread, so it can recognise itself and never wait for itself.
        private let onEngineThread = EngineThreadMarker()

        init(label: String) {
            self.label = label
        }

        /// Starts the engine thread and waits until it has set up the multi handle (or failed to).
        func start(options: CurlOptions, limits: Limits) throws {
            let started = DispatchSemaphore(value: 0)
            finished.enter()
            // A thread of its own, not one of libdispatch's workers: the loop runs for the engine's
            // whole life, and a process with many engines (the tests start dozens) would otherwise
            // use up the pool libdispatch's queues share, and starve them.
            let thread = Thread { [self] in
                onEngineThread.markCurrent()
                // The handles are created on the engine thread so that no other thread ever calls
                // libcurl with them (the wakeup aside).
                do {
                    let loop = try EngineLoop(engine: self, options: options, limits: limits)
                    started.signal()
                    loop.run()
                } catch {
                    state.withLock {
                        $0.accepting = false
                        $0.startError = error as? CurlError ?? CurlError(.other, message: "curl_multi_init failed")
                    }
                    started.signal()
                }
                finished.leave()
            }
            thread.name = label
            thread.start()
            started.wait()
            if let error = state.withLock({ $0.startError }) {
                throw error
            }
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
            state.withLock { state in
                guard state.wakeup != nil else { return }
                state.cancellations.append(id)
                state.wake()
            }
        }

        func shutdown(gracePeriod: Duration) {
            state.withLock { state in
                if state.accepting {
                    state.accepting = false
                    state.stopDeadline = .now + max(gracePeriod, .zero)
                }
                state.wake()
            }
            if !onEngineThread.isCurrent {
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
