import Foundation
import Logging
import ServiceLifecycle
import Telemetry

/// Every role of one process, as `receiptq all` runs them: the work and schedule roles' services,
/// then the API. `all`, the tests' whole system and the conformance suite's deployment all build
/// their roles here, so what they run is one list.
public struct ReceiptQueueRoles: Sendable {
    /// The worker, the scheduler, the webhook dispatcher, the retention sweep, the revenue folding and (with trust roots
    /// and a secrets key) the notification history sweep: started before the API, stopped after it.
    public var background: [any Service]
    /// The API, listed last so it is the first to stop taking requests.
    public var api: any Service

    /// The roles in the order a service group runs them.
    public var services: [any Service] { background + [api] }
}

extension ReceiptQueueApp {
    /// Builds every role of one process.
    /// - Parameters:
    ///   - onlyApps: keep the scheduler, dispatcher and sweeps to these apps (nil: all); a test
    ///     sharing a database keeps to its own app.
    ///   - now: the clock of the system's answers: the client API's, the dates of Apple's answers
    ///     the worker stores, the history sweep's (the conformance suite's simulated time).
    ///   - schedulerNow: the scheduler's clock (tests move it to make re-polls due): retry
    ///     promotion, the janitor, and (without `repollClock`) the re-poll claims. Without
    ///     `repollClock` the worker plans each next poll on the machine's clock, so a scheduler
    ///     ahead of it would find every poll due at once: it stays apart from `now`.
    ///   - repollClock: one clock for the subscriptions' polls, apart from the queue's: the worker
    ///     plans each next poll on it and the scheduler claims due re-polls on it, while retries,
    ///     their promotion, the janitor and heartbeats keep the machine's pace (a retry's time is
    ///     Apple's `Retry-After` or the backoff, machine seconds; a clock that jumped a day would
    ///     promote every retry at once). The conformance suite gives its simulated clock (the
    ///     same as `now`), so its jumps make polls due; nil (production, `all`, the tests' whole
    ///     system): as described for `schedulerNow`.
    ///   - notificationSweep: also run the history sweep (when trust roots and a secrets key allow).
    ///   - onAPIRunning: called with the API's port once it listens.
    public static func makeRoles(
        _ configuration: AppConfiguration, onlyApps: [UUID]? = nil, now: @escaping @Sendable () -> Date = { Date() },
        schedulerNow: @escaping @Sendable () -> Date = { Date() }, repollClock: (@Sendable () -> Date)? = nil,
        notificationSweep: Bool = true, metrics: PrometheusExporter, logger: Logger,
        onAPIRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> ReceiptQueueRoles {
        var background: [any Service] = [
            try makeWorker(configuration, metrics: metrics, logger: logger, observedAt: now, repollClock: repollClock),
            makeScheduler(configuration, onlyApps: onlyApps, now: schedulerNow, repollClock: repollClock, metrics: metrics, logger: logger),
            makeWebhookDispatcher(configuration, onlyApps: onlyApps, metrics: metrics, logger: logger),
            // The machine's clock, not the scheduler's: a test moving that one weeks ahead for its
            // re-polls must not see its events and calls expire under it.
            makeRetentionSweep(configuration, onlyApps: onlyApps, metrics: metrics, logger: logger),
            makeRevenueFolding(configuration, onlyApps: onlyApps, now: now, logger: logger),
        ]
        if notificationSweep,
            let sweep = try makeNotificationSweep(configuration, onlyApps: onlyApps, now: now, metrics: metrics, logger: logger)
        {
            background.append(sweep.service)
        }
        let api = try makeAPI(configuration, metrics: metrics, logger: logger, now: now, onRunning: onAPIRunning)
        return ReceiptQueueRoles(background: background, api: api)
    }
}
