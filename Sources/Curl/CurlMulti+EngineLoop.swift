internal import CCurl
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

extension CurlMulti {
    /// The engine thread's side: owns the `CURLM *`, the in-flight transfers and the free list.
    ///
    /// It drives libcurl's multi *socket* interface on epoll: libcurl says which sockets to watch
    /// and when its next timeout is due (the C callbacks in the CCurl shim), and each wake-up hands
    /// it only the sockets that are ready. `curl_multi_perform` + `curl_multi_poll` instead visit
    /// every transfer and poll every socket on each wake-up, which at 100 transfers and a few
    /// thousand answers a second was a quarter of the worker's CPU.
    ///
    /// Not `Sendable`: created, run and torn down on the engine thread only.
    final class EngineLoop {
        /// One transfer inside libcurl.
        private struct Transfer {
            let id: UInt64
            let easy: EasyHandle
            let completion: Completion
        }

        private typealias Outcome = (completion: Completion, result: Result<HTTPResponse, CurlError>)

        private let engine: Engine
        private let options: CurlOptions
        private let limits: Limits
        private let multi: UnsafeMutableRawPointer
        private let epoll: Int32
        private let wakeFD: Int32
        /// When libcurl wants `CURL_SOCKET_TIMEOUT` (monotonic nanoseconds; -1: not at all), written
        /// by its timer callback.
        private let timer: UnsafeMutablePointer<Int64>
        private var active: [UnsafeMutableRawPointer: Transfer] = [:]
        private var activeIDs: [UInt64: UnsafeMutableRawPointer] = [:]
        private var idle: [EasyHandle] = []
        private var tornDown = false
        // Counted here and published once per loop iteration, so the lock is taken twice per round,
        // not once per transfer.
        private var connectionsDelta = 0
        private var handlesDelta = 0

        private static let maxPollMilliseconds: Int32 = 1000

        init(engine: Engine, options: CurlOptions, limits: Limits) throws {
            CurlGlobal.initialize()
            guard CurlGlobal.succeeded, let multi = curl_multi_init() else {
                throw CurlError(.other, message: "curl_multi_init failed")
            }
            let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
            let wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
            guard epoll >= 0, wakeFD >= 0, ccurl_epoll_watch(epoll, wakeFD) == 0 else {
                if epoll >= 0 { close(epoll) }
                if wakeFD >= 0 { close(wakeFD) }
                curl_multi_cleanup(multi)
                throw CurlError(.other, message: "cannot create the engine's epoll set")
            }
            self.engine = engine
            self.options = options
            self.limits = limits
            self.multi = multi
            self.epoll = epoll
            self.wakeFD = wakeFD
            timer = .allocate(capacity: 1)
            timer.initialize(to: -1)
            // deinit frees the multi handle if a setopt below throws.
            // HTTP/2 over TLS multiplexes many transfers on one connection; plain HTTP stays 1.1
            // because h2c prior knowledge cannot multiplex in 7.88 (see CurlOptions.HTTPVersion).
            try set(CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX)
            try set(CURLMOPT_MAX_HOST_CONNECTIONS, limits.maxHostConnections)
            // A transfer uses one connection at a time, so more connections than transfers could only
            // be idle ones; and the cache keeps that many, because libcurl's default (4 × the handles
            // currently added) shrinks as a burst drains and would close connections we want again.
            try set(CURLMOPT_MAX_TOTAL_CONNECTIONS, limits.maxConcurrent)
            try set(CURLMOPT_MAXCONNECTS, limits.maxConcurrent)
            let registered = ccurl_multi_use_epoll(multi, epoll, timer)
            guard registered == CURLM_OK else { throw CurlError.map(multi: registered) }
            engine.state.withLock { $0.wakeup = Wakeup(fd: wakeFD) }
        }

        deinit {
            teardown()
        }

        /// Drives transfers until shutdown has drained or cancelled all of them, then tears down.
        func run() {
            var outcomes: [Outcome] = []
            var stopping = false
            var ready = [Int32](repeating: 0, count: 256)
            var bits = [Int32](repeating: 0, count: 256)
            while true {
                let intake = takeInbox()
                stopping = intake.stopping
                for submission in intake.admit {
                    start(submission, into: &outcomes)
                }
                for submission in intake.rejected {
                    outcomes.append((submission.completion, .failure(intake.stopping ? Engine.shutDownError : Engine.cancelledError)))
                }
                for id in intake.cancelActive {
                    if let raw = activeIDs[id] {
                        cancel(raw, with: Engine.cancelledError, into: &outcomes)
                    }
                }
                var pollTimeout = Self.maxPollMilliseconds
                if let deadline = intake.deadline {
                    let left = deadline - .now
                    if left <= .zero {
                        for raw in Array(active.keys) {
                            cancel(raw, with: Engine.shutDownError, into: &outcomes)
                        }
                    } else {
                        pollTimeout = min(pollTimeout, Int32(clamping: Self.milliseconds(rounding: left)))
                    }
                }
                // A transfer just added asks for a timeout of 0 ms: that is what starts it.
                if let failure = fireTimerIfDue() {
                    failEverything(failure, into: &outcomes)
                    break
                }
                reapFinished(into: &outcomes)
                deliver(&outcomes)
                if stopping && active.isEmpty {
                    break
                }
                // Sleeps until a socket is ready, libcurl's next timeout, a wakeup from another
                // thread, or pollTimeout.
                let count = ccurl_epoll_wait(epoll, &ready, &bits, Int32(ready.count), min(pollTimeout, timerWait()))
                guard count >= 0 else {
                    failEverything(CurlError(.other, message: "epoll_wait failed (errno \(errno))"), into: &outcomes)
                    break
                }
                var failure: CurlError?
                for index in 0..<Int(count) where failure == nil {
                    if ready[index] == wakeFD {
                        var value: UInt64 = 0
                        _ = read(wakeFD, &value, MemoryLayout<UInt64>.size)
                        continue
                    }
                    var running: Int32 = 0
                    let acted = curl_multi_socket_action(multi, ready[index], bits[index], &running)
                    if acted != CURLM_OK { failure = CurlError.map(multi: acted) }
                }
                if let failure = failure ?? fireTimerIfDue() {
                    failEverything(failure, into: &outcomes)
                    break
                }
                reapFinished(into: &outcomes)
            }
            deliver(&outcomes)
            teardown()
        }

        /// Runs libcurl's timeouts once its timer is due (the timer is one-shot: cleared first, since
        /// libcurl may set the next one from inside the call). Returns the error of a failed call.
        private func fireTimerIfDue() -> CurlError? {
            let due = timer.pointee
            guard due >= 0, due <= ccurl_monotonic_ns() else { return nil }
            timer.pointee = -1
            var running: Int32 = 0
            let acted = ccurl_multi_socket_timeout(multi, &running)
            return acted == CURLM_OK ? nil : CurlError.map(multi: acted)
        }

        /// Milliseconds until libcurl's timer is due (rounded up, so the wait does not end just
        /// before it); `maxPollMilliseconds` while none is set.
        private func timerWait() -> Int32 {
            let due = timer.pointee
            guard due >= 0 else { return Self.maxPollMilliseconds }
            let left = due - ccurl_monotonic_ns()
            return left <= 0 ? 0 : Int32(clamping: (left + 999_999) / 1_000_000)
        }

        private struct Intake {
            var admit: [Submission] = []
            var rejected: [Submission] = []
            var cancelActive: [UInt64] = []
            var stopping = false
            var deadline: ContinuousClock.Instant? = nil
        }

        /// Takes what other threads left: new requests up to the free capacity, cancellations,
        /// and the shutdown flag (which turns every queued request into a rejection).
        private func takeInbox() -> Intake {
            let room = limits.maxConcurrent - active.count
            return engine.state.withLock { state in
                var intake = Intake()
                state.wakeupPending = false
                intake.stopping = !state.accepting
                intake.deadline = state.stopDeadline
                if intake.stopping {
                    intake.rejected = state.pending.removeAll()
                } else {
                    while intake.admit.count < room, let submission = state.pending.popFirst() {
                        intake.admit.append(submission)
                    }
                }
                for id in state.cancellations {
                    if let submission = state.pending.remove(id: id) {
                        intake.rejected.append(submission)
                    } else {
                        intake.cancelActive.append(id)
                    }
                }
                state.cancellations = []
                return intake
            }
        }

        private func start(_ submission: Submission, into outcomes: inout [Outcome]) {
            let easy: EasyHandle
            if let reused = idle.popLast() {
                easy = reused
            } else {
                do {
                    easy = try EasyHandle(options: options, waitForMultiplexing: options.httpVersion == .http2TLS)
                    handlesDelta += 1
                } catch {
                    outcomes.append((submission.completion, .failure(Self.curlError(error))))
                    return
                }
            }
            do {
                try easy.prepare(submission.request)
            } catch {
                recycle(easy)
                outcomes.append((submission.completion, .failure(Self.curlError(error))))
                return
            }
            let added = curl_multi_add_handle(multi, easy.raw)
            guard added == CURLM_OK else {
                easy.abandon()
                recycle(easy)
                outcomes.append((submission.completion, .failure(CurlError.map(multi: added))))
                return
            }
            active[easy.raw] = Transfer(id: submission.id, easy: easy, completion: submission.completion)
            activeIDs[submission.id] = easy.raw
        }

        private func reapFinished(into outcomes: inout [Outcome]) {
            var queuedMessages: Int32 = 0
            while let message = curl_multi_info_read(multi, &queuedMessages) {
                // Read the message before removing the handle: removal invalidates it.
                guard message.pointee.msg == CURLMSG_DONE, let raw = message.pointee.easy_handle else { continue }
                let result = message.pointee.data.result
                guard let transfer = active.removeValue(forKey: raw) else { continue }
                activeIDs[transfer.id] = nil
                _ = curl_multi_remove_handle(multi, raw)
                let outcome = transfer.easy.finish(result)
                connectionsDelta += transfer.easy.newConnections
                recycle(transfer.easy)
                outcomes.append((transfer.completion, outcome))
            }
        }

        /// Aborts an in-flight transfer: removing the handle closes its connection mid-transfer.
        private func cancel(_ raw: UnsafeMutableRawPointer, with error: CurlError, into outcomes: inout [Outcome]) {
            guard let transfer = active.removeValue(forKey: raw) else { return }
            activeIDs[transfer.id] = nil
            _ = curl_multi_remove_handle(multi, raw)
            transfer.easy.abandon()
            recycle(transfer.easy)
            outcomes.append((transfer.completion, .failure(error)))
        }

        /// After a multi-handle failure (only out of memory or a libcurl bug): nothing can run any
        /// more, so every request, queued or in flight, fails with `error` and intake stops.
        private func failEverything(_ error: CurlError, into outcomes: inout [Outcome]) {
            let queued = engine.state.withLock { state in
                state.accepting = false
                state.cancellations = []
                return state.pending.removeAll()
            }
            for raw in Array(active.keys) {
                cancel(raw, with: error, into: &outcomes)
            }
            for submission in queued {
                outcomes.append((submission.completion, .failure(error)))
            }
        }

        private func recycle(_ easy: EasyHandle) {
            // Never more than maxConcurrent handles exist, so this bound only documents the invariant.
            if idle.count < limits.maxConcurrent {
                idle.append(easy)
            }
        }

        /// Publishes the counters, then calls the completions (outside the lock, on this thread), so a
        /// completion already sees itself counted.
        private func deliver(_ outcomes: inout [Outcome]) {
            let failed = outcomes.count { if case .failure = $0.result { true } else { false } }
            let (completed, inFlight, connections, handles) = (outcomes.count, active.count, connectionsDelta, handlesDelta)
            engine.state.withLock { state in
                state.counters.inFlight = inFlight
                state.counters.completed += completed
                state.counters.failed += failed
                state.counters.connectionsOpened += connections
                state.counters.handlesCreated += handles
            }
            connectionsDelta = 0
            handlesDelta = 0
            for outcome in outcomes {
                outcome.completion(outcome.result)
            }
            outcomes.removeAll(keepingCapacity: true)
        }

        /// Frees every handle; the wakeup is withdrawn first so no other thread can touch the multi
        /// handle while or after it is freed.
        private func teardown() {
            guard !tornDown else { return }
            tornDown = true
            engine.state.withLock { $0.wakeup = nil }
            for (raw, _) in active {
                _ = curl_multi_remove_handle(multi, raw)
            }
            active = [:]
            activeIDs = [:]
            idle = []
            // Closes the cached connections; the easy handles were all removed or never added. The
            // socket callback may still run in there (removing sockets from the epoll set).
            _ = curl_multi_cleanup(multi)
            close(epoll)
            close(wakeFD)
            timer.deinitialize(count: 1)
            timer.deallocate()
        }

        private func set(_ option: CURLMoption, _ value: Int) throws {
            let result = ccurl_multi_setopt_long(multi, option, value)
            guard result == CURLM_OK else {
                throw CurlError.map(multi: result)
            }
        }

        private static func curlError(_ error: any Error) -> CurlError {
            error as? CurlError ?? CurlError(.other, message: "unexpected error")
        }

        private static func milliseconds(rounding duration: Duration) -> Int64 {
            let (seconds, attoseconds) = duration.components
            // Rounded up, so the loop never wakes just before the deadline and polls again for 0 ms.
            return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        }
    }
}

@available(*, unavailable)
extension CurlMulti.EngineLoop: Sendable {}
