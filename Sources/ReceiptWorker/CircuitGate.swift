import Foundation
import ReceiptCore
import Synchronization

/// A worker process's door to the shared outage circuit: the decision before each call is local
/// and free, and outcomes reach the shared circuit in batches, so the circuit costs a few Redis
/// calls per second instead of two per job.
///
/// **Threads.** ``permission(now:)`` and ``flush(now:)`` run on the worker's fetcher thread only
/// (they may call Redis); ``record(outage:probe:)`` runs anywhere (it only counts, under a lock),
/// typically on the HTTP engine's thread, which must never block.
///
/// **Staleness.** The local view of a closed circuit is refreshed every `refreshInterval`; a
/// circuit opened by another process is noticed that much later, during which this process calls
/// Apple as it would have anyway. An open period is never cut short locally: only a probe closes
/// the circuit, and the probe is asked for in Redis.
final class CircuitGate: @unchecked Sendable {
    private enum View {
        case closed(checkedAt: Date)
        case open(until: Date)
        /// This process holds the probe lease and its call is in flight; others wait.
        case probing
    }

    private struct Pending {
        var successes = 0
        var outages = 0
        var probeVerdict: Bool?
    }

    // Fetcher thread only.
    private let circuit: (any OutageCircuit)?
    private var view = View.closed(checkedAt: .distantPast)
    private let refreshInterval: TimeInterval
    // Any thread.
    private let pending = Mutex(Pending())

    /// Wraps `circuit` (nil: every call is allowed and nothing is recorded).
    init(circuit: (any OutageCircuit)?, refreshInterval: Duration) {
        self.circuit = circuit
        self.refreshInterval = refreshInterval.seconds
    }

    /// Before a call to Apple. A circuit that cannot be read (Redis trouble) lets the call through;
    /// the queue will surface that error anyway.
    func permission(now: Date) -> CircuitPermission {
        guard let circuit else { return .allow }
        switch view {
        case .closed:
            return .allow
        case .open(let until) where now < until:
            return .deny(until: until)
        case .probing:
            // Our probe decides soon; look again in a second rather than after a whole open period.
            return .deny(until: now.addingTimeInterval(1))
        case .open:
            // The open period is over: Redis decides who probes (one prober for all processes).
            do {
                let permission = try circuit.permission(now: now)
                switch permission {
                case .allow: view = .closed(checkedAt: now)
                case .probe: view = .probing
                case .deny(let until): view = .open(until: until)
                }
                return permission
            } catch {
                return .allow
            }
        }
    }

    /// After a call: counts its outcome (any thread, never blocks on I/O).
    func record(outage: Bool, probe: Bool) {
        guard circuit != nil else { return }
        pending.withLock { pending in
            if probe {
                pending.probeVerdict = outage
            } else if outage {
                pending.outages += 1
            } else {
                pending.successes += 1
            }
        }
    }

    /// Sends the counted outcomes to the shared circuit and refreshes the local view when it is old.
    /// - Returns: the transitions this process caused, to be logged once.
    /// - Throws: when Redis cannot be reached; the counts are then dropped (the circuit is a hint,
    ///   not a ledger) and the view is kept.
    func flush(now: Date) throws -> [CircuitTransition] {
        guard let circuit else { return [] }
        let batch = pending.withLock { pending in
            defer { pending = Pending() }
            return pending
        }
        var transitions: [CircuitTransition] = []
        if let verdict = batch.probeVerdict {
            let transition = try circuit.record(outage: verdict, now: now)
            switch transition {
            case .closed: view = .closed(checkedAt: now)
            case .reopened(let until, _), .opened(let until): view = .open(until: until)
            case nil: view = .open(until: now)  // the lease lapsed meanwhile: ask again
            }
            transition.map { transitions.append($0) }
        }
        if batch.successes + batch.outages > 0, let transition = try circuit.record(successes: batch.successes, outages: batch.outages, now: now) {
            if case .opened(let until) = transition { view = .open(until: until) }
            transitions.append(transition)
        }
        if case .closed(let checkedAt) = view, now.timeIntervalSince(checkedAt) >= refreshInterval {
            switch try circuit.state(now: now) {
            case .closed: view = .closed(checkedAt: now)
            case .open(let until): view = .open(until: until)
            case .halfOpen: view = .open(until: now)
            }
        }
        return transitions
    }
}
