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
    private let revenue: RevenueGauges?

    /// Creates the endpoint.
    /// - Parameters:
    ///   - exporter: the process's registry.
    ///   - gauges: the deployment-wide gauges read at each scrape (nil: only this process's own metrics).
    ///   - revenue: the revenue gauges read at each scrape (serve's, which holds a Postgres pool).
    public init(exporter: PrometheusExporter, gauges: QueueGauges?, revenue: RevenueGauges? = nil) {
        self.exporter = exporter
        self.gauges = gauges
        self.revenue = revenue
    }

    /// Adds `GET /metrics` to a router.
    public func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.get("/metrics") { _, _ in await self.response() }
    }

    /// The exposition as a response.
    public func response() async -> Response {
        await gauges?.refresh()
        await revenue?.refresh()
        let bytes = exporter.exposition()
        return Response(
            status: .ok, headers: [.contentType: PrometheusExporter.contentType, .cacheControl: "no-store"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The routes of a role's metrics listener: `GET /metrics` and `GET /health/live`, nothing else
    /// (the composition root serves them, with its connection limits).
    public func listenerRouter() -> Router<BasicRequestContext> {
        let router = Router()
        addRoutes(to: router)
        router.get("/health/live") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: #"{"status":"ok"}"#)))
        }
        return router
    }
}
