import Foundation
import Logging
import Metrics
import ReceiptCore

/// The revenue gauges read from the rollup at scrape time: each app's active subscriptions and
/// MRR per currency today (`receiptq_revenue_active_subscriptions`, `receiptq_revenue_mrr_milli`).
/// The deployment's figures, whichever serve process exports them (aggregate with `max`).
public struct RevenueGauges: Sendable {
    private let figures: any RevenueFigures
    private let factory: any MetricsFactory
    private let logger: Logger
    private let now: @Sendable () -> Date

    /// Creates the gauges.
    /// - Parameters:
    ///   - figures: where the levels come from (one read per scrape).
    ///   - factory: the process's metrics backend.
    ///   - logger: where a failed read is reported.
    ///   - now: the injected clock (today's levels).
    public init(figures: any RevenueFigures, factory: any MetricsFactory, logger: Logger, now: @escaping @Sendable () -> Date = { Date() }) {
        self.figures = figures
        self.factory = factory
        self.logger = logger
        self.now = now
    }

    /// Reads the levels and sets a gauge per app and currency. When Postgres does not answer the
    /// gauges keep their last values, and the failure is logged.
    public func refresh() async {
        do {
            for level in try await figures.currentLevels(at: now()) {
                let dimensions = [("app", level.app), ("currency", level.currency)]
                Gauge(label: MetricCatalog.revenueActiveSubscriptions, dimensions: dimensions, factory: factory)
                    .record(level.activeSubscriptions)
                Gauge(label: MetricCatalog.revenueMRR, dimensions: dimensions, factory: factory).record(level.mrrMilli)
            }
        } catch {
            logger.warning("Metrics could not read the revenue figures from Postgres", error: error)
        }
    }
}
