import Logging
import Metrics
import Synchronization
import Telemetry

/// Which listener a guard keeps (the `listener` label of its metrics).
public enum HTTPListener: String, Sendable, CaseIterable {
    /// serve's API port (`HTTP_PORT`): the client API, the softphone, the admin API and the dashboard.
    case api
    /// A role's `METRICS_PORT`.
    case metrics
}

/// The part of an exchange a client took too long over (the `phase` label).
enum TimeoutPhase: String, CaseIterable {
    /// The request head: a silent connection, or headers dribbled (slowloris).
    case header
    /// The body: trickled slower than the minimum rate, or stalled.
    case body
    /// Between requests on a kept-alive connection.
    case idle
}

/// A connection closed on accept: the listener held `HTTP_MAX_CONNECTIONS` already.
enum ConnectionRefusal: Error {
    case tooManyConnections
}

/// One listener's share of the guard, shared by its connections (on every event loop): the open
/// connections counted against the cap, the metrics, and the refusal's log line.
final class ListenerGuard: Sendable {
    let limits: ConnectionLimits
    private let open = Atomic<Int>(0)
    /// Refusals since the last log line, and when that line was written: a flood of connections
    /// must not become a flood of log lines.
    private let refusals = Mutex<(count: Int, loggedAt: ContinuousClock.Instant?)>((0, nil))
    private let listener: HTTPListener
    private let openGauge: Gauge
    private let refused: Counter
    private let timedOut: [TimeoutPhase: Counter]
    private let logger: Logger

    /// The shortest time between two refusal log lines.
    static let refusalLogInterval = Duration.seconds(10)

    init(limits: ConnectionLimits, listener: HTTPListener, metrics: any MetricsFactory, logger: Logger) {
        self.limits = limits
        self.listener = listener
        let dimensions = [("listener", listener.rawValue)]
        openGauge = Gauge(label: MetricCatalog.httpConnections, dimensions: dimensions, factory: metrics)
        refused = Counter(label: MetricCatalog.httpConnectionsRefused, dimensions: dimensions, factory: metrics)
        timedOut = Dictionary(
            uniqueKeysWithValues: TimeoutPhase.allCases.map {
                ($0, Counter(label: MetricCatalog.httpConnectionsTimedOut, dimensions: dimensions + [("phase", $0.rawValue)], factory: metrics))
            })
        self.logger = logger
    }

    /// Counts a new connection in; false (and nothing counted) when the listener is full.
    func admit() -> Bool {
        let count = open.add(1, ordering: .relaxed).newValue
        guard count > limits.maxConnections else {
            openGauge.record(count)
            return true
        }
        open.subtract(1, ordering: .relaxed)
        refused.increment()
        let report: Int? = refusals.withLock { state in
            state.count += 1
            let now = ContinuousClock.now
            if let loggedAt = state.loggedAt, now - loggedAt < Self.refusalLogInterval { return nil }
            defer { state = (0, now) }
            return state.count
        }
        if let report {
            logger.warning(
                "Connections refused: the listener holds HTTP_MAX_CONNECTIONS",
                metadata: [
                    "http.listener": "\(listener.rawValue)", "http.max_connections": "\(limits.maxConnections)",
                    "http.connections_refused": "\(report)",
                ])
        }
        return false
    }

    /// Counts a closed connection out.
    func release() {
        openGauge.record(open.subtract(1, ordering: .relaxed).newValue)
    }

    /// Counts a connection closed for a client's slowness.
    func timedOut(_ phase: TimeoutPhase) {
        timedOut[phase]?.increment()
        logger.debug(
            "Connection closed: the client was too slow", metadata: ["http.listener": "\(listener.rawValue)", "http.phase": "\(phase.rawValue)"])
    }
}
