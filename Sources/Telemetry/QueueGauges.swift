import Logging
import Metrics
import ReceiptCore

/// The gauges read from Redis at scrape time: queue depths, retries, dead letters, live workers,
/// the outage circuit and the primary's replicas. They describe the whole deployment, whichever process exports them (the
/// alerts aggregate them with `max`).
public struct QueueGauges: Sendable {
    private let overview: any QueueOverview
    private let logger: Logger
    private let depth: [JobKind: Gauge]
    private let importDepth: Gauge
    private let retries: Gauge
    private let dead: Gauge
    private let workers: Gauge
    private let circuit: Gauge
    private let replicas: Gauge
    private let replicaLagSeconds: Gauge
    private let replicaLagBytes: Gauge

    /// Creates the gauges.
    /// - Parameters:
    ///   - overview: where the numbers come from (one snapshot per scrape).
    ///   - factory: the process's metrics backend.
    ///   - logger: where a failed read is reported.
    public init(overview: any QueueOverview, factory: any MetricsFactory, logger: Logger) {
        self.overview = overview
        self.logger = logger
        depth = Dictionary(
            uniqueKeysWithValues: JobKind.allCases.map {
                ($0, Gauge(label: MetricCatalog.queueDepth, dimensions: [("queue", $0.rawValue)], factory: factory))
            })
        importDepth = Gauge(label: MetricCatalog.queueDepth, dimensions: [("queue", JobEnvelope.importQueue)], factory: factory)
        retries = Gauge(label: MetricCatalog.retryJobs, factory: factory)
        dead = Gauge(label: MetricCatalog.deadJobs, factory: factory)
        workers = Gauge(label: MetricCatalog.liveWorkers, factory: factory)
        circuit = Gauge(label: MetricCatalog.circuitState, factory: factory)
        replicas = Gauge(label: MetricCatalog.redisReplicas, factory: factory)
        replicaLagSeconds = Gauge(label: MetricCatalog.redisReplicaLagSeconds, factory: factory)
        replicaLagBytes = Gauge(label: MetricCatalog.redisReplicaLagBytes, factory: factory)
    }

    /// Reads Redis and sets the gauges. When Redis does not answer the gauges keep their last
    /// values: the scrape still delivers the process's own counters, and the failure is logged.
    public func refresh() async {
        do {
            update(from: try await overview.snapshot())
        } catch {
            logger.warning("Metrics could not read the queues from Redis", error: error)
        }
    }

    /// Sets the gauges from a snapshot.
    func update(from snapshot: QueueSnapshot) {
        for (kind, gauge) in depth { gauge.record(snapshot.queued[kind] ?? 0) }
        importDepth.record(snapshot.importQueued)
        retries.record(snapshot.retries)
        dead.record(snapshot.dead)
        // One lane per worker process: its heartbeat and processing list.
        workers.record(snapshot.workers.count)
        circuit.record(snapshot.circuit.status.metricValue)
        replicas.record(snapshot.replication.replicas)
        replicaLagSeconds.record(snapshot.replication.lagSeconds)
        replicaLagBytes.record(snapshot.replication.lagBytes)
    }
}

extension CircuitStatus {
    /// `receiptq_circuit_state`: 0 closed, 1 half-open, 2 open.
    var metricValue: Int {
        switch self {
        case .closed: 0
        case .halfOpen: 1
        case .open: 2
        }
    }
}
