import Foundation
import Synchronization

/// The rules every door applies around a credential check: the throttle asked first at a
/// password door, every failure counted, every decision reported to the ``AuthenticationLog``.
///
/// A password door calls ``admit(_:now:)`` before checking the secret (refusing the request on a
/// closed verdict), then ``granted(_:)`` or ``refused(_:_:now:)``. A token door asks no round trip
/// of the throttle for a right token (a generated token is not guessed, and it is every request):
/// it calls ``isKnownClosed(_:now:)`` first, which refuses an address this process saw closed
/// without a store look-up (a flood of wrong tokens must not reach Postgres), then checks the
/// token, and calls ``refused(_:_:now:)`` for a wrong one, whose verdict says 401 or 429.
///
/// The shared throttle (Redis) decides; while it cannot be reached the process's own
/// ``LocalGuessingThrottle`` does, so an outage never opens unlimited guessing. Closed addresses
/// are remembered in the process until their lock-out ends, so most refusals of a flood cost no
/// round trip.
public final class AuthGate: Sendable {
    private let shared: any GuessingThrottle
    private let local: LocalGuessingThrottle
    private let log: any AuthenticationLog
    private let closed = Mutex<[String: Date]>([:])
    /// Whether ``closed`` holds anything: read without the lock on every request of a token door,
    /// so that the usual case (no address closed) costs neither the lock nor the attempt's strings.
    private let anyClosed = Atomic<Bool>(false)

    /// Creates the gate.
    /// - Parameters:
    ///   - throttle: the throttle every replica shares.
    ///   - policy: the fallback's policy (the shared one's, so both decide alike).
    ///   - log: where decisions are reported.
    public init(throttle: any GuessingThrottle, policy: GuessingPolicy, log: any AuthenticationLog) {
        self.shared = throttle
        self.local = LocalGuessingThrottle(policy: policy)
        self.log = log
    }

    /// Whether a password may be checked now; reports a closed verdict.
    public func admit(_ attempt: AuthAttempt, now: Date) async -> ThrottleVerdict {
        if let seconds = knownClosed(attempt, now: now) {
            return report(attempt, .closed(retryAfter: seconds))
        }
        let verdict: ThrottleVerdict
        do {
            verdict = try await shared.verdict(for: attempt, now: now)
        } catch {
            log.throttleUnavailable(error)
            verdict = local.verdict(for: attempt, now: now)
        }
        return report(attempt, verdict)
    }

    /// Whether any address is known, in this process, to be closed (a token door skips
    /// ``isKnownClosed(_:now:)`` and building its attempt when none is).
    public var knowsClosedAddresses: Bool { anyClosed.load(ordering: .acquiring) }

    /// Retry-After seconds when `attempt`'s address is known, in this process, to be closed.
    public func isKnownClosed(_ attempt: AuthAttempt, now: Date) -> Int? {
        guard let seconds = knownClosed(attempt, now: now) else { return nil }
        log.record(attempt, outcome: .throttled(retryAfter: seconds))
        return seconds
    }

    /// Reports a granted attempt.
    public func granted(_ attempt: AuthAttempt) { log.record(attempt, outcome: .granted) }

    /// Reports a refused attempt and, when it was a guess, counts it; the verdict for the next
    /// attempt from there (a token door answers 429 rather than 401 when it is closed).
    @discardableResult
    public func refused(_ attempt: AuthAttempt, _ reason: AuthRefusal, now: Date) async -> ThrottleVerdict {
        log.record(attempt, outcome: .refused(reason))
        guard reason.isGuess else { return .open }
        let verdict: ThrottleVerdict
        do {
            verdict = try await shared.recordFailure(attempt, now: now)
        } catch {
            log.throttleUnavailable(error)
            verdict = local.recordFailure(attempt, now: now)
        }
        remember(attempt, verdict, now: now)
        return verdict
    }

    private func report(_ attempt: AuthAttempt, _ verdict: ThrottleVerdict) -> ThrottleVerdict {
        if case .closed(let seconds) = verdict { log.record(attempt, outcome: .throttled(retryAfter: seconds)) }
        return verdict
    }

    /// Remembers an address a failure of its own closed (by its count, or by its account's: either
    /// way this address has failed, so the lock-out applies to it).
    private func remember(_ attempt: AuthAttempt, _ verdict: ThrottleVerdict, now: Date) {
        guard case .closed(let seconds) = verdict else { return }
        closed.withLock { closed in
            if closed.count >= LocalGuessingThrottle.capacity { closed = closed.filter { $0.value > now } }
            if closed.count >= LocalGuessingThrottle.capacity { closed.removeAll() }
            closed[Self.key(attempt)] = now.addingTimeInterval(Double(seconds))
            anyClosed.store(true, ordering: .releasing)
        }
    }

    private static func key(_ attempt: AuthAttempt) -> String { "\(attempt.door.rawValue) \(attempt.address)" }

    private func knownClosed(_ attempt: AuthAttempt, now: Date) -> Int? {
        closed.withLock { closed in
            guard let until = closed[Self.key(attempt)] else { return nil }
            if until <= now {
                closed[Self.key(attempt)] = nil
                if closed.isEmpty { anyClosed.store(false, ordering: .releasing) }
                return nil
            }
            return GuessingPolicy.retryAfter(until: until, now: now)
        }
    }
}
