import HTTPTypes
import Hummingbird
import Metrics
import Synchronization

/// Counts every request the router answers and times it: `receiptq_http_requests_total{route,
/// method,status}` and `receiptq_http_request_duration_seconds{route,method}`.
///
/// Every label is bounded: `route` is the matched route's pattern (`/admin/{id}`, never the path
/// asked for) or `unmatched`, `method` one of the methods the API knows or `other`, and `status` a
/// three-digit code.
public struct HTTPMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    private let series: SeriesCache

    /// Creates the middleware.
    /// - Parameter factory: the process's metrics backend.
    public init(factory: any MetricsFactory) {
        series = SeriesCache(factory: factory)
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let method = Self.methodLabel(request.method)
        do {
            let response = try await next(request, context)
            // The endpoint path is set by the router while `next` runs.
            series.record(route: context.endpointPath, method: method, status: response.status.code, elapsed: .now - start)
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            series.record(route: context.endpointPath, method: method, status: status, elapsed: .now - start)
            throw error
        }
    }

    /// The method as a bounded label: a client may send any token as a method.
    static func methodLabel(_ method: HTTPRequest.Method) -> String {
        switch method {
        case .get, .head, .post, .put, .patch, .delete, .options: method.rawValue
        default: "other"
        }
    }
}

/// One counter per label set and one timer per route and method, made once: creating them through
/// the factory on every request would take the registry's lock twice per request; this takes one lock.
private final class SeriesCache: Sendable {
    private struct Key: Hashable {
        var route: String
        var method: String
        var status: Int
    }

    private struct Series {
        var counters: [Key: Counter] = [:]
        var timers: [Key: Metrics.Timer] = [:]
    }

    private let factory: any MetricsFactory
    private let series = Mutex(Series())

    init(factory: any MetricsFactory) {
        self.factory = factory
    }

    func record(route: String?, method: String, status: Int, elapsed: Duration) {
        // Hummingbird names the not-found responder's path "NotFound".
        let route = route.flatMap { $0 == "NotFound" ? nil : $0 } ?? "unmatched"
        let status = (100...599).contains(status) ? status : 500
        let (counter, timer) = series.withLock { series in
            let key = Key(route: route, method: method, status: status)
            let counter =
                series.counters[key]
                ?? Counter(
                    label: MetricCatalog.httpRequests, dimensions: [("route", route), ("method", method), ("status", String(status))],
                    factory: factory)
            series.counters[key] = counter
            // The duration has no status label: one timer per route and method.
            let timerKey = Key(route: route, method: method, status: 0)
            let timer =
                series.timers[timerKey]
                ?? Metrics.Timer(label: MetricCatalog.httpRequestDuration, dimensions: [("route", route), ("method", method)], factory: factory)
            series.timers[timerKey] = timer
            return (counter, timer)
        }
        counter.increment()
        timer.record(duration: elapsed)
    }
}
