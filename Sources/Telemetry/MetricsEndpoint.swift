import Hummingbird
import Logging
import NIOCore

/// `GET /metrics`: the Prometheus exposition of one process, with the Redis gauges read first.
///
/// serve answers it on its API port; `METRICS_PORT` gives every role (work and schedule have no
/// other listener) a small server of its own with only this route and `/health/live`.
public struct MetricsEndpoint: Sendable {
    private let exporter: PrometheusExporter
    private let gauges: QueueGauges?

    /// Creates the endpoint.
    /// - Parameters:
    ///   - exporter: the process's registry.
    ///   - gauges: the deployment-wide gauges read at each scrape (nil: only this process's own metrics).
    public init(exporter: PrometheusExporter, gauges: QueueGauges?) {
        self.exporter = exporter
        self.gauges = gauges
    }

    /// Adds `GET /metrics` to a router.
    public func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.get("/metrics") { _, _ in await self.response() }
    }

    /// The exposition as a response.
    public func response() async -> Response {
        await gauges?.refresh()
        let bytes = exporter.exposition()
        return Response(
            status: .ok, headers: [.contentType: PrometheusExporter.contentType, .cacheControl: "no-store"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The metrics listener of a role: `GET /metrics` and `GET /health/live`, nothing else.
    /// - Parameters:
    ///   - host: the interface (the role's `HTTP_HOST`).
    ///   - port: `METRICS_PORT` (0 picks a free port).
    ///   - onRunning: called with the bound port once it listens.
    public func server(
        host: String, port: Int, logger: Logger, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        addRoutes(to: router)
        router.get("/health/live") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: #"{"status":"ok"}"#)))
        }
        return Application(
            router: router, configuration: .init(address: .hostname(host, port: port), serverName: "receiptq-metrics"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) }, logger: logger)
    }
}
