import Curl
import Foundation
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Telemetry
import Testing

/// `GET /metrics` scraped over HTTP from running roles, after traffic whose every count is known.
@Suite("Metrics: /metrics of serve, work and schedule", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct MetricsTests {
    @Test("One run's jobs, Apple calls, latencies, HTTP requests and queue gauges, all within the catalogue")
    func runCountedExactly() async throws {
        // Apple slower than the request timeout for one receipt: a transport failure.
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0", "APPSTORE_REQUEST_TIMEOUT_MS": "2000"])
        defer { Task { await system.stop() } }

        var statuses: [Int: Int] = [:]
        func post(_ directives: String?) async throws {
            let (receipt, _) = try system.forgeReceipt(mock: directives)
            let (status, _) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
            statuses[status, default: 0] += 1
        }
        // Sandbox receipts: production answers 21007, then the sandbox validates.
        for _ in 0..<3 { try await post(nil) }
        try await post("status=21004")  // shared secret refused: straight to the dead letters
        try await post("http_status=503")  // Apple's 5xx: retried
        try await post("delay_ms=3000")  // no answer in time: retried
        for index in 0..<20 { _ = try await system.get(path: "/no/such/route/\(index)") }
        let (unauthorized, _) = try await system.get(path: "/client/itunes_connect/receipts/\(UUID())", token: "wrong")
        #expect(unauthorized == 401)

        var scrape = Scrape(text: "")
        /// Every call to Apple `endpoint` counted, by status class.
        func calls(_ scrape: Scrape, _ endpoint: String) -> Double {
            ["2xx", "3xx", "4xx", "5xx", "transport"].compactMap {
                scrape.value("receiptq_apple_calls_total", ["endpoint": endpoint, "status_class": $0])
            }.reduce(0, +)
        }
        let settled = try await eventually(timeout: .seconds(30)) {
            scrape = try await Self.scrape(system.client, "http://127.0.0.1:\(system.apiPort)/metrics")
            // A call's count and its duration are two updates: a scrape between them (a loaded
            // CI run's did) is not yet the state the checks below read.
            return calls(scrape, "production") == scrape.value("receiptq_apple_call_duration_seconds_count", ["endpoint": "production"])
                && calls(scrape, "sandbox") == scrape.value("receiptq_apple_call_duration_seconds_count", ["endpoint": "sandbox"])
                && scrape.value("receiptq_jobs_processed_total", ["outcome": "validated"]) == 3
                && scrape.value("receiptq_jobs_processed_total", ["outcome": "dead"]) == 1
                && scrape.value("receiptq_apple_calls_total", ["endpoint": "production", "status_class": "transport"]) ?? 0 >= 1
                && scrape.value("receiptq_apple_calls_total", ["endpoint": "production", "status_class": "5xx"]) ?? 0 >= 1
                && scrape.value("receiptq_dead_jobs") == 1
        }
        #expect(settled, "\(scrape.text)")

        // Jobs: three valid and one dead are done; the other two keep retrying.
        #expect(scrape.value("receiptq_jobs_processed_total", ["outcome": "invalid"]) == 0)
        #expect(scrape.value("receiptq_jobs_processed_total", ["outcome": "retried"]) ?? 0 >= 2)
        #expect(scrape.value("receiptq_jobs_processed_total", ["outcome": "deferred"]) == 0)
        // Apple: 3 × (production 21007 + sandbox 200), the 21004 (an HTTP 200), then the failures.
        // A sandbox call can time out too on a starved machine (CI's full run did): its job asks
        // production again, so each such call adds a production 2xx and a sandbox call.
        let sandboxTimeouts = scrape.value("receiptq_apple_calls_total", ["endpoint": "sandbox", "status_class": "transport"]) ?? 0
        #expect(scrape.value("receiptq_apple_calls_total", ["endpoint": "sandbox", "status_class": "2xx"]) == 3)
        #expect(scrape.value("receiptq_apple_calls_total", ["endpoint": "production", "status_class": "2xx"]) == 4 + sandboxTimeouts)
        #expect(scrape.value("receiptq_apple_calls_total", ["endpoint": "sandbox", "status_class": "5xx"]) == 0)
        #expect(scrape.value("receiptq_apple_call_duration_seconds_count", ["endpoint": "production"]) == calls(scrape, "production"))
        #expect(scrape.value("receiptq_apple_call_duration_seconds_count", ["endpoint": "sandbox"]) == 3 + sandboxTimeouts)
        // The timed-out call took at least the request timeout.
        #expect(scrape.value("receiptq_apple_call_duration_seconds_sum", ["endpoint": "production"]) ?? 0 >= 2)
        // Latency: only the four jobs that are done, none of the re-polls.
        #expect(scrape.value("receiptq_job_latency_seconds_count", ["kind": "validate"]) == 4)
        #expect(scrape.value("receiptq_job_latency_seconds_count", ["kind": "repoll"]) == 0)
        #expect(scrape.value("receiptq_job_latency_seconds_bucket", ["kind": "validate", "le": "+Inf"]) == 4)

        // HTTP: by route pattern, never by the path asked for.
        let route = "/client/itunes_connect/receipts"
        for (status, count) in statuses {
            #expect(scrape.value("receiptq_http_requests_total", ["route": route, "method": "POST", "status": "\(status)"]) == Double(count))
        }
        #expect(scrape.value("receiptq_http_requests_total", ["route": "unmatched", "method": "GET", "status": "404"]) == 20)
        #expect(!scrape.text.contains("/no/such/route"))
        #expect(
            scrape.value("receiptq_http_requests_total", ["route": "/client/itunes_connect/receipts/{id}", "method": "GET", "status": "401"]) == 1)
        #expect(scrape.value("receiptq_http_request_duration_seconds_count", ["route": route, "method": "POST"]) == 6)

        // Deployment-wide gauges, read from this system's Redis keys at the scrape.
        #expect(scrape.value("receiptq_live_workers") == 1)
        #expect(scrape.value("receiptq_circuit_state") == 0)
        #expect(scrape.value("receiptq_queue_depth", ["queue": "repoll"]) == 0)
        let waiting = (scrape.value("receiptq_retry_jobs") ?? 0) + (scrape.value("receiptq_queue_depth", ["queue": "validate"]) ?? 0)
        #expect(waiting <= 2, "only the two failing receipts can be waiting")
        #expect(scrape.value("receiptq_repolls_enqueued_total") == 0)
        #expect(scrape.value("receiptq_repolls_due") == 0)

        #expect(scrape.violations().isEmpty, "\(scrape.violations())")
        // Prometheus's own linter of the exposition format (names, units, HELP, TYPE, histograms).
        let lint = try Self.promtoolCheckMetrics(scrape.text)
        #expect(lint.status == 0, "\(lint.output)")
        // Receipts are not metrics: not one byte of one in the exposition.
        let (receipt, _) = try system.forgeReceipt()
        #expect(!scrape.text.contains(String(receipt.prefix(40))))
    }

    @Test("work and schedule answer /metrics and /health/live on METRICS_PORT; SIGTERM stops both cleanly")
    func processMetricsPorts() async throws {
        let jobs = 200
        let workPort = try freeLoopbackPort()
        let fixture = try await WorkerProcessFixture(
            jobs: jobs, appleDelay: .milliseconds(10), worker: ["WORKER_CONCURRENCY": "16", "METRICS_PORT": String(workPort)])
        defer { Task { await fixture.close() } }
        let client = try HTTPClient(options: CurlOptions(), lanes: 2)
        let worker = try fixture.startWorker()
        defer { if worker.isRunning { kill(worker.processIdentifier, SIGKILL) } }

        var scrape = Scrape(text: "")
        _ = try await eventually(timeout: .seconds(90), interval: .milliseconds(200)) {
            scrape = (try? await Self.scrape(client, "http://127.0.0.1:\(workPort)/metrics")) ?? scrape
            return scrape.value("receiptq_jobs_processed_total", ["outcome": "validated"]) == Double(jobs)
        }
        #expect(try fixture.stored() == jobs)
        #expect(scrape.value("receiptq_jobs_processed_total", ["outcome": "validated"]) == Double(jobs), "\(scrape.text)")
        #expect(scrape.value("receiptq_apple_calls_total", ["endpoint": "production", "status_class": "2xx"]) == Double(jobs))
        #expect(scrape.value("receiptq_job_latency_seconds_count", ["kind": "validate"]) == Double(jobs))
        #expect(scrape.value("receiptq_queue_depth", ["queue": "validate"]) == 0)
        #expect(scrape.value("receiptq_live_workers") == 1)
        // A worker answers no HTTP request of the API (its metrics listener counts its connections).
        #expect(scrape.series.allSatisfy { !$0.name.hasPrefix("receiptq_http_request") })
        #expect(scrape.series.allSatisfy { $0.labels["listener"] ?? "metrics" == "metrics" })
        #expect(scrape.violations().isEmpty, "\(scrape.violations())")
        let live = try await client.send(Curl.HTTPRequest(method: "GET", url: "http://127.0.0.1:\(workPort)/health/live", headers: [], body: []))
        #expect(live.status == 200)
        let other = try await client.send(Curl.HTTPRequest(method: "GET", url: "http://127.0.0.1:\(workPort)/admin", headers: [], body: []))
        #expect(other.status == 404)

        let schedulePort = try freeLoopbackPort()
        // The scheduler: its own counters, and the same deployment-wide gauges (the same Redis).
        // Its own database: a scheduler serves every app of its database, and in the shared test
        // database its webhook dispatcher took other tests' deliveries and queued them under this
        // fixture's prefix, where this worker (another secrets key) buried them as unreadable.
        let database = "receiptq_metrics_\(UUID().uuidString.prefix(8).lowercased())"
        let admin = try PostgresConnection(configuration: try AppConfiguration(environment: fixture.environment).postgres)
        defer {
            try? admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
            admin.close()
        }
        try admin.execute("CREATE DATABASE \(database)")
        let schedulerEnvironment = fixture.environment.merging(["METRICS_PORT": String(schedulePort), "POSTGRES_DB": database]) { _, new in new }
        try ReceiptQueueApp.migrate(try AppConfiguration(environment: schedulerEnvironment))
        let scheduler = try startProcess(ReceiptqExecutable.url, ["schedule"], environment: schedulerEnvironment)
        defer { if scheduler.isRunning { kill(scheduler.processIdentifier, SIGKILL) } }
        var schedulerScrape: Scrape?
        _ = try await eventually(timeout: .seconds(30), interval: .milliseconds(200)) {
            schedulerScrape = try? await Self.scrape(client, "http://127.0.0.1:\(schedulePort)/metrics")
            return schedulerScrape?.value("receiptq_repolls_due") != nil
        }
        let schedulerMetrics = try #require(schedulerScrape)
        #expect(schedulerMetrics.value("receiptq_repolls_enqueued_total") != nil)
        #expect(schedulerMetrics.value("receiptq_repolls_due") != nil)
        #expect(schedulerMetrics.value("receiptq_live_workers") == 1)
        #expect(schedulerMetrics.value("receiptq_jobs_processed_total", ["outcome": "validated"]) == nil, "the scheduler settles no job")
        #expect(schedulerMetrics.violations().isEmpty, "\(schedulerMetrics.violations())")

        for process in [worker, scheduler] {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
            #expect(process.terminationReason == .exit && process.terminationStatus == 0)
        }
    }

    /// `promtool check metrics` on `exposition`: the unpacked Debian promtool that
    /// scripts/validate-ops (run first by scripts/test) keeps in .local/promtool.
    static func promtoolCheckMetrics(_ exposition: String) throws -> (status: Int32, output: String) {
        let promtool = ReceiptqExecutable.url.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".local/promtool/usr/bin/promtool")
        try #require(FileManager.default.isExecutableFile(atPath: promtool.path), "run scripts/validate-ops first: it unpacks promtool")
        let result = try ChildProcess.run([promtool.path, "check", "metrics"], input: Array(exposition.utf8))
        return (result.status, String(decoding: result.output, as: UTF8.self))
    }

    @Test("Redis unreachable: /metrics still answers 200 with the process's own counters")
    func redisDown() async throws {
        let configuration = try AppConfiguration(environment: [
            "HTTP_HOST": "127.0.0.1", "HTTP_PORT": "0", "REDIS_PORT": String(try freeLoopbackPort()), "REDIS_CONNECT_TIMEOUT_MS": "200",
            "RECEIPTQ_TRUST_ROOTS_DIR": try TestSystem.trustDirectory.get().path,
        ])
        let api = try await StandaloneAPI(configuration)
        defer { Task { await api.stop() } }
        let client = try HTTPClient(options: CurlOptions(), lanes: 2)
        let ready = try await client.send(Curl.HTTPRequest(method: "GET", url: "http://127.0.0.1:\(api.port)/health/ready", headers: [], body: []))
        #expect(ready.status == 503)
        _ = try await Self.scrape(client, "http://127.0.0.1:\(api.port)/metrics")
        let scrape = try await Self.scrape(client, "http://127.0.0.1:\(api.port)/metrics")
        #expect(scrape.value("receiptq_http_requests_total", ["route": "/metrics", "method": "GET", "status": "200"]) == 1)
        #expect(scrape.value("receiptq_http_requests_total", ["route": "/health/ready", "method": "GET", "status": "503"]) == 1)
        #expect(scrape.violations().isEmpty, "\(scrape.violations())")
    }

    static func scrape(_ client: HTTPClient, _ url: String) async throws -> Scrape {
        let response = try await client.send(Curl.HTTPRequest(method: "GET", url: url, headers: [], body: []))
        guard response.status == 200 else { throw RestartTestError("GET \(url) answered \(response.status)") }
        let contentType = response.headers.first { $0.name.lowercased() == "content-type" }?.value
        guard contentType == PrometheusExporter.contentType else { throw RestartTestError("content type \(contentType ?? "none")") }
        return Scrape(text: String(decoding: response.body, as: UTF8.self))
    }
}

/// A Prometheus text exposition, parsed: each sample's name, labels and value.
struct Scrape {
    struct Sample {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    let text: String
    let series: [Sample]

    init(text: String) {
        self.text = text
        series = text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap(Self.parse)
    }

    /// The value of the sample with exactly these labels.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        series.first { $0.name == name && $0.labels == labels }?.value
    }

    /// Samples outside ops/prometheus/metrics.yml's contract: unknown names, unknown labels, or a
    /// value outside a label's bounded set.
    func violations() -> [String] {
        series.compactMap { sample in
            let base = ["_bucket", "_sum", "_count"].reduce(sample.name) { name, suffix in
                MetricCatalog.entry(name) == nil && name.hasSuffix(suffix) ? String(name.dropLast(suffix.count)) : name
            }
            guard let entry = MetricCatalog.entry(base) else { return "unknown metric \(sample.name)" }
            for (label, value) in sample.labels where !(label == "le" && sample.name.hasSuffix("_bucket")) {
                guard let allowed = entry.labels[label] else { return "\(sample.name) has an unknown label \(label)" }
                if let allowed, !allowed.contains(value) { return "\(sample.name){\(label)=\"\(value)\"} is outside the set" }
            }
            return nil
        }
    }

    /// `name{a="x",b="y"} 1.5` (label values may hold braces and commas, never quotes here).
    private static func parse(_ line: Substring) -> Sample? {
        guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { return nil }
        let head = line[..<space]
        guard let open = head.firstIndex(of: "{") else { return Sample(name: String(head), labels: [:], value: value) }
        var labels: [String: String] = [:]
        var rest = head[head.index(after: open)...].dropLast()  // the closing brace
        while let equals = rest.firstIndex(of: "=") {
            let key = String(rest[..<equals])
            let afterQuote = rest.index(equals, offsetBy: 2)
            guard let closing = rest[afterQuote...].firstIndex(of: "\"") else { return nil }
            labels[key] = String(rest[afterQuote..<closing])
            rest = rest[rest.index(after: closing)...].drop { $0 == "," }
        }
        return Sample(name: String(head[..<open]), labels: labels, value: value)
    }
}
