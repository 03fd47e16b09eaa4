import Foundation
import Logging
import Metrics
import ReceiptCore
import ServiceLifecycle

/// Recovers the App Store Server Notifications receiptq missed — its endpoint or Redis was down,
/// Apple gave up retrying, a deployment was being moved — from Apple's Get Notification History.
///
/// For every app with a notification URL and an In-App Purchase key, in production and the
/// sandbox, it asks for the notifications Apple signed since the last sweep (a stored cursor, with
/// Apple's `paginationToken` between pages, so an interrupted sweep resumes where it stopped) and
/// hands each to the same rule as the endpoint (`accept`): checked, queued once per notification
/// UUID. Windows overlap by `overlap`, and repeats dedupe away. It sweeps on start — a restart is
/// a gap — and every `interval`; a page is taken from the same rate bucket as the workers' calls
/// (`throttle`).
///
/// The cursor moves only after every notification of a page was accepted: with Redis down the
/// sweep stops and the same page is asked for again next time.
public final class NotificationHistorySweep: Service, Sendable {
    /// Sweep settings.
    public struct Configuration: Sendable {
        /// How often every app's history is asked for (`NOTIFICATION_HISTORY_INTERVAL_SECONDS`).
        public var interval: Duration
        /// How far back each window reaches before the previous one's end (clocks and Apple's
        /// indexing are not instant).
        public var overlap: Duration
        /// How far back the first sweep of an app looks (Apple keeps 180 days).
        public var firstLookBack: Duration
        /// The most pages one app takes per sweep (the rest waits for the next).
        public var maxPagesPerSweep: Int
        /// The longest the sweep sleeps before it reads the injected clock again: `interval` is
        /// counted on that clock, and a clock that jumps (a conformance run's simulated one) is
        /// noticed within a tick rather than after `interval` of the machine's time.
        public var tick: Duration

        /// Creates a configuration; every value has a production default.
        public init(
            interval: Duration = .seconds(900), overlap: Duration = .seconds(600), firstLookBack: Duration = .seconds(86_400),
            maxPagesPerSweep: Int = 500, tick: Duration = .seconds(1)
        ) {
            self.interval = interval
            self.overlap = overlap
            self.firstLookBack = firstLookBack
            self.maxPagesPerSweep = max(1, maxPagesPerSweep)
            self.tick = max(tick, .milliseconds(10))
        }
    }

    /// What one sweep did.
    public struct Report: Sendable, Equatable {
        public var pages = 0
        public var accepted = 0
        /// A page could not be fetched, or a notification not queued: that app's cursor waits.
        public var interrupted = 0
    }

    /// How a notification handed to the endpoint's rule ended.
    public enum Acceptance: Sendable {
        /// Queued, or already known: the cursor may move past it.
        case accepted
        /// Refused as forged or foreign: logged, and the cursor moves past it.
        case refused
        /// Not stored (Redis down): stop, ask again next time.
        case unavailable
    }

    let configuration: Configuration
    let source: any NotificationHistorySource
    let cursors: any NotificationHistoryCursors
    let accept: @Sendable (String, AppRecord) async -> Acceptance
    let throttle: @Sendable (AppRecord, AppStoreEnvironment) async -> Void
    let now: @Sendable () -> Date
    let logger: Logger
    /// `receiptq_notification_apps_silent`: apps with a notification URL and no notification for a day.
    let silent: Gauge

    /// Creates the sweep.
    /// - Parameters:
    ///   - source: Apple's Get Notification History.
    ///   - cursors: the apps to sweep and where each stands.
    ///   - accept: the endpoint's rule for one `signedPayload` of `app`.
    ///   - throttle: waits for a slot of the app's Notification History rate bucket.
    ///   - now: the injected clock.
    public init(
        configuration: Configuration = Configuration(), source: any NotificationHistorySource, cursors: any NotificationHistoryCursors,
        accept: @escaping @Sendable (String, AppRecord) async -> Acceptance,
        throttle: @escaping @Sendable (AppRecord, AppStoreEnvironment) async -> Void = { _, _ in },
        now: @escaping @Sendable () -> Date = { Date() }, metrics: any MetricsFactory = MetricsSystem.factory, logger: Logger
    ) {
        self.silent = Gauge(label: "receiptq_notification_apps_silent", factory: metrics)
        self.configuration = configuration
        self.source = source
        self.cursors = cursors
        self.accept = accept
        self.throttle = throttle
        self.now = now
        self.logger = logger
    }

    public func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let due = now().addingTimeInterval(configuration.interval.seconds)
            let report = await sweep()
            if report.accepted > 0 || report.interrupted > 0 {
                logger.info(
                    "Notification history swept",
                    metadata: [
                        "history.pages": "\(report.pages)", "history.accepted": "\(report.accepted)",
                        "history.interrupted": "\(report.interrupted)",
                    ])
            }
            await wait(until: due)
        }
    }

    /// Sleeps until the injected clock reads `due` (an interval after the last sweep began), a
    /// tick at most at a time; ends early on shutdown.
    func wait(until due: Date) async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let left = due.timeIntervalSince(now())
            guard left > 0 else { return }
            let nap = min(Duration.milliseconds(Int64((left * 1000).rounded(.up))), configuration.tick)
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: nap) }
            } catch {
                return
            }
        }
    }

    /// One sweep over every app and both environments.
    public func sweep() async -> Report {
        var report = Report()
        let apps: [AppRecord]
        do {
            apps = try await cursors.sweptApps()
        } catch {
            logger.warning("Notification history: apps not readable", error: error)
            report.interrupted += 1
            return report
        }
        for app in apps where !Task.isShuttingDownGracefully {
            for environment in [AppStoreEnvironment.production, .sandbox] {
                await sweep(app, environment, into: &report)
            }
        }
        // After the sweep: what it recovered counts as heard of.
        if let count = try? await cursors.silentApps(since: now().addingTimeInterval(-86_400)) { silent.record(count) }
        return report
    }

    private func sweep(_ app: AppRecord, _ environment: AppStoreEnvironment, into report: inout Report) async {
        let at = now()
        // Apple answers for the last 180 days only.
        let oldest = at.addingTimeInterval(-179 * 86_400)
        var cursor: NotificationHistoryCursor
        do {
            cursor =
                try await cursors.cursor(appID: app.id, environment: environment)
                ?? NotificationHistoryCursor(
                    start: at.addingTimeInterval(-configuration.firstLookBack.seconds), end: at, paginationToken: nil)
        } catch {
            report.interrupted += 1
            return
        }
        // A finished window: the next one runs from its end (less the overlap) until now.
        if cursor.paginationToken == nil { cursor = NotificationHistoryCursor(start: cursor.start, end: at, paginationToken: nil) }
        cursor.start = max(cursor.start, oldest)
        for _ in 0..<configuration.maxPagesPerSweep {
            await throttle(app, environment)
            let page: NotificationHistoryPage
            do {
                page = try await source.page(
                    app: app, environment: environment, start: cursor.start, end: cursor.end, paginationToken: cursor.paginationToken)
            } catch {
                logger.debug(
                    "Notification history not answered", error: error,
                    metadata: ["app.id": "\(app.id.uuidString.lowercased())", "environment": "\(environment.rawValue)"])
                report.interrupted += 1
                return
            }
            report.pages += 1
            for payload in page.signedPayloads {
                switch await accept(payload, app) {
                case .accepted: report.accepted += 1
                case .refused: break
                case .unavailable:
                    report.interrupted += 1
                    return
                }
            }
            if page.hasMore, let token = page.paginationToken {
                cursor.paginationToken = token
            } else {
                let next = cursor.end.addingTimeInterval(-configuration.overlap.seconds)
                cursor = NotificationHistoryCursor(start: max(next, cursor.start), end: cursor.end, paginationToken: nil)
            }
            do {
                try await cursors.save(cursor, appID: app.id, environment: environment)
            } catch {
                report.interrupted += 1
                return
            }
            if cursor.paginationToken == nil { return }
        }
    }
}
