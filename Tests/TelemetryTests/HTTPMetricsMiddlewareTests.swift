import CoreMetrics
import HTTPTypes
import Hummingbird
import RouterTesting
import Testing

@testable import Telemetry

@Suite("HTTP metrics middleware: bounded labels")
struct HTTPMetricsMiddlewareTests {
    @Test("Requests are counted by route pattern, a bounded method and the status, thrown errors included")
    func boundedLabels() async throws {
        let exporter = PrometheusExporter()
        let router = Router()
        router.add(middleware: HTTPMetricsMiddleware(factory: exporter))
        router.get("/items/{id}") { _, _ in "item" }
        router.post("/items") { _, _ -> String in throw HTTPError(.unprocessableContent) }
        try await Application(router: router).withRouterClient { client in
            for id in 0..<5 { try await client.execute(uri: "/items/\(id)", method: .get) { #expect($0.status == .ok) } }
            try await client.execute(uri: "/items", method: .post) { #expect($0.status == .unprocessableContent) }
            for path in ["/a", "/b/c", "/secret-looking-path"] { try await client.execute(uri: path, method: .get) { _ in } }
            try await client.execute(uri: "/items/9", method: HTTPRequest.Method("PURGE")!) { _ in }
        }
        let text = String(decoding: exporter.exposition(), as: UTF8.self)
        #expect(text.contains(#"receiptq_http_requests_total{route="/items/{id}",method="GET",status="200"} 5"#))
        #expect(text.contains(#"receiptq_http_requests_total{route="/items",method="POST",status="422"} 1"#))
        #expect(text.contains(#"receiptq_http_requests_total{route="unmatched",method="GET",status="404"} 3"#))
        #expect(text.contains(#"method="other""#))
        #expect(!text.contains("PURGE") && !text.contains("/items/9") && !text.contains("secret-looking-path"))
        #expect(text.contains(#"receiptq_http_request_duration_seconds_count{route="/items/{id}",method="GET"} 5"#))
    }

    @Test("Metrics outside the catalogue record nothing; another library's are dropped without a trace")
    func outsideTheCatalogue() {
        let exporter = PrometheusExporter()
        exporter.makeCounter(label: "http.server.requests", dimensions: [("path", "/x")]).increment(by: 1)
        exporter.makeTimer(label: "nio.latency", dimensions: []).recordNanoseconds(5)
        #expect(exporter.exposition().isEmpty)
    }
}
