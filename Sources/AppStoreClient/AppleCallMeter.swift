import Metrics
import ReceiptCore
import Synchronization

/// Counts every App Store Server API call a process sends, by app, endpoint, purpose and
/// environment (`receiptq_server_api_calls_total`): what each app's budget is spent on, seen by
/// Prometheus next to Apple's limits.
///
/// Apps come and go while the process runs, so a series is made at its first call rather than up
/// front; the set stays bounded by apps × endpoints × purposes × 2.
public final class AppleCallMeter: Sendable {
    private struct Series: Hashable {
        var app: String
        var endpoint: ServerAPIEndpoint
        var purpose: ApplePurpose
        var environment: AppStoreEnvironment
    }

    private let factory: any MetricsFactory
    private let counters = Mutex<[Series: Counter]>([:])

    /// Creates a meter on `factory` (the process's registry; `MetricsSystem.factory` when the
    /// process bootstrapped one).
    public init(factory: any MetricsFactory) {
        self.factory = factory
    }

    /// One call sent.
    public func sent(app: String, endpoint: ServerAPIEndpoint, purpose: ApplePurpose, environment: AppStoreEnvironment) {
        let series = Series(app: app, endpoint: endpoint, purpose: purpose, environment: environment)
        let counter = counters.withLock { counters in
            if let counter = counters[series] { return counter }
            let counter = Counter(
                label: "receiptq_server_api_calls_total",
                dimensions: [
                    ("app", app), ("endpoint", endpoint.rawValue), ("purpose", purpose.rawValue), ("environment", environment.rawValue),
                ], factory: factory)
            counters[series] = counter
            return counter
        }
        counter.increment()
    }
}
