import CoreMetrics
import Prometheus

/// A swift-metrics factory over one Prometheus registry that creates only the metrics of
/// ``MetricCatalog``, with the catalogue's help text and buckets.
///
/// Anything else (another library's metric, a misspelt name, a label outside its bounded set) gets
/// a handler that records nothing, so the exposition never holds a series the alerts do not know of and a label can never
/// grow without bound. Debug builds stop at such a mistake instead, so the tests find it.
public struct PrometheusExporter: MetricsFactory, Sendable {
    /// The registry the handlers record into; ``exposition()`` renders it.
    public let registry: PrometheusCollectorRegistry

    /// Creates an exporter with a fresh registry (one per process, or one per test).
    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric recorded so far.
    public func exposition() -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(8192)
        registry.emit(into: &buffer)
        return buffer
    }

    /// The content type of ``exposition()``.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// The catalogue entry when `label` and `dimensions` are within the contract.
    private func admit(_ label: String, _ dimensions: [(String, String)], as kind: MetricCatalog.Kind) -> MetricCatalog.Entry? {
        // A library's own metrics (the process bootstraps this factory) are not part of the contract.
        guard label.hasPrefix(MetricCatalog.namespace) else { return nil }
        guard let entry = MetricCatalog.entry(label), entry.kind == kind, dimensions.count == entry.labels.count else {
            assertionFailure("\(label) \(dimensions.map(\.0)) is not in the metric catalogue as a \(kind)")
            return nil
        }
        for (name, value) in dimensions {
            guard let allowed = entry.labels[name] else {
                assertionFailure("\(label) has no label \(name)")
                return nil
            }
            if let allowed, !allowed.contains(value) {
                assertionFailure("\(label){\(name)=\"\(value)\"} is outside the label's values")
                return nil
            }
        }
        return entry
    }

    public func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        guard let entry = admit(label, dimensions, as: .counter) else { return NOOPMetricsHandler.instance }
        return registry.makeCounter(descriptor: entry.descriptor, labels: dimensions)
    }

    public func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        guard let entry = admit(label, dimensions, as: .counter) else { return NOOPMetricsHandler.instance }
        return registry.makeCounter(descriptor: entry.descriptor, labels: dimensions)
    }

    public func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        guard let entry = admit(label, dimensions, as: .gauge) else { return NOOPMetricsHandler.instance }
        return registry.makeGauge(descriptor: entry.descriptor, labels: dimensions)
    }

    public func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        // Histograms here measure durations and go through `Timer`; a recorder is a gauge.
        guard !aggregate || !label.hasPrefix(MetricCatalog.namespace) else {
            assertionFailure("\(label): use a Gauge or a Timer")
            return NOOPMetricsHandler.instance
        }
        guard let entry = admit(label, dimensions, as: .gauge) else { return NOOPMetricsHandler.instance }
        return registry.makeGauge(descriptor: entry.descriptor, labels: dimensions)
    }

    public func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        guard let entry = admit(label, dimensions, as: .histogram) else { return NOOPMetricsHandler.instance }
        return registry.makeDurationHistogram(
            descriptor: entry.descriptor, labels: dimensions, buckets: entry.buckets.map { Duration.nanoseconds(Int64($0 * 1e9)) })
    }

    public func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    public func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    public func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    public func destroyRecorder(_ handler: any RecorderHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    public func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { registry.unregisterDurationHistogram(histogram) }
    }
}

extension MetricCatalog.Entry {
    /// The whole name as the metric name (the catalogue's names already end in their unit).
    fileprivate var descriptor: MetricNameDescriptor { MetricNameDescriptor(metricName: name, unitName: "", helpText: help) }
}
