import ReceiptCore
import Synchronization

/// What `/health/ready` answers: whether Redis (where receipts are queued) and Postgres (where
/// tokens are checked) both answer, checked at most once per ``maxAge`` whoever asks.
///
/// Probes cost nothing: every probe within ``maxAge`` of the last check reads its result, and
/// probes arriving while a check runs wait for that one check instead of starting their own, so a
/// fleet of probes (kubelet, load balancer, monitoring) makes one Redis `PING` and one Postgres
/// `SELECT 1` per half second at most. A recovery shows within ``maxAge`` plus one check. A server
/// that has not answered within ``patience`` counts as unreachable (a partitioned one can leave a
/// ping waiting for minutes), so a probe is answered within that time.
final class Readiness: Sendable {
    /// What the last check found.
    struct Report: Sendable, Equatable {
        var redis: Bool
        var postgres: Bool

        var isReady: Bool { redis && postgres }

        /// The answer's `status`: `ok`, or which servers do not answer.
        var status: String {
            let down = [redis ? nil : "redis", postgres ? nil : "postgres"].compactMap { $0 }
            return down.isEmpty ? "ok" : "\(down.joined(separator: " and ")) unreachable"
        }
    }

    /// How long one check's result answers every probe.
    static let maxAge = Duration.milliseconds(500)
    /// How long a check waits for a server's answer (the serve manifests' probe timeout is 3 s).
    static let defaultPatience = Duration.seconds(2)

    private struct State {
        var last: (report: Report, at: ContinuousClock.Instant)?
        var running: Task<Report, Never>?
    }

    private let intake: any ReceiptIntake
    private let catalog: any ReceiptCatalog
    /// Monotonic, so a wall clock set back cannot keep an old result fresh.
    private let now: @Sendable () -> ContinuousClock.Instant
    /// How long a check waits for each server.
    let patience: Duration
    private let state = Mutex(State())

    /// - Parameters:
    ///   - patience: how long a check waits for each server's answer.
    ///   - now: the injected clock (tests move it past ``maxAge``).
    init(
        intake: any ReceiptIntake, catalog: any ReceiptCatalog, patience: Duration = Readiness.defaultPatience,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.patience = patience
        self.intake = intake
        self.catalog = catalog
        self.now = now
    }

    /// The last check's report while it is fresh, else the report of a check made now (or of the
    /// one already running).
    func report() async -> Report {
        enum Answer {
            case fresh(Report)
            case running(Task<Report, Never>)
        }
        let answer = state.withLock { state -> Answer in
            if let last = state.last, now() - last.at < Self.maxAge { return .fresh(last.report) }
            if let running = state.running { return .running(running) }
            // Unstructured: the check is shared by every waiting probe, so one probe's request
            // being cancelled (its client gone) must not cancel it for the others.
            let task = Task { await self.check() }
            state.running = task
            return .running(task)
        }
        switch answer {
        case .fresh(let report): return report
        case .running(let check): return await check.value
        }
    }

    private func check() async -> Report {
        async let redis = Self.answer(within: patience) { await self.intake.ping() }
        async let postgres = Self.answer(within: patience) { await self.catalog.ping() }
        let report = await Report(redis: redis, postgres: postgres)
        state.withLock { state in
            state.last = (report, now())
            state.running = nil
        }
        return report
    }

    /// What `ping` answers, or false once `limit` has passed without an answer. The ping is left to
    /// finish on its own (a blocked socket read cannot be cancelled); nothing waits for it.
    static func answer(within limit: Duration, _ ping: @escaping @Sendable () async -> Bool) async -> Bool {
        let pending = Mutex<CheckedContinuation<Bool, Never>?>(nil)
        let answer = { @Sendable (value: Bool) in pending.withLock { $0.take() }?.resume(returning: value) }
        return await withCheckedContinuation { continuation in
            pending.withLock { $0 = continuation }
            let deadline = Task {
                try? await Task.sleep(for: limit)
                answer(false)
            }
            Task {
                answer(await ping())
                deadline.cancel()
            }
        }
    }
}
