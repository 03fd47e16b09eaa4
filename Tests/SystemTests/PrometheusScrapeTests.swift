import Curl
import Foundation
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// A real Prometheus (Debian's, unpacked by scripts/validate-ops) scraping a running receiptq with
/// ops/prometheus/alerts.yml loaded, asked every query of the Grafana dashboard.
@Suite(
    "Prometheus scrapes a running receiptq: rules, alerts and the dashboard's queries", .blockingWork,
    .enabled(if: TestEnvironment.integrationEnabled))
struct PrometheusScrapeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("Targets up, every rule of alerts.yml evaluating without error, no alert on a healthy run, every dashboard query answered")
    func scrapeAndQuery() async throws {
        let binary = Self.root.appendingPathComponent(".local/promtool/usr/bin/prometheus")
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "run scripts/validate-ops first: it unpacks Prometheus")
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-prometheus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = """
            global: {scrape_interval: 5s, scrape_timeout: 5s, evaluation_interval: 1s}
            rule_files: ["\(Self.root.appendingPathComponent("ops/prometheus/alerts.yml").path)"]
            scrape_configs:
              - job_name: receiptq
                static_configs: [{targets: ["127.0.0.1:\(system.apiPort)"]}]
            """
        try config.write(to: directory.appendingPathComponent("prometheus.yml"), atomically: true, encoding: .utf8)
        let port = try freeLoopbackPort()
        let log = directory.appendingPathComponent("prometheus.log")
        let prometheus = try ChildProcess(
            [
                binary.path, "--config.file=\(directory.appendingPathComponent("prometheus.yml").path)",
                "--storage.tsdb.path=\(directory.appendingPathComponent("data").path)", "--web.listen-address=127.0.0.1:\(port)",
            ], stdout: .file(log.path), stderr: .output)
        defer {
            prometheus.terminate()
            prometheus.waitUntilExit()
        }
        let api = PrometheusAPI(client: system.client, base: "http://127.0.0.1:\(port)")

        // A first scrape before any job, so that the run shows as an increase (a rate) in Prometheus.
        let up = try await eventually(timeout: .seconds(60)) { (try? await api.scalar("up{job=\"receiptq\"}")) == 1 }
        try #require(up, "Prometheus did not scrape /metrics")
        for _ in 0..<5 {
            let (receipt, _) = try system.forgeReceipt()
            let (status, _) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
            #expect(status == 200)
        }
        // And a StoreKit 2 purchase, so that the App Store Server API's calls are counted too.
        let transaction = try system.signedTransaction()
        #expect([200, 206].contains(try await system.post(#"{"signed_transaction":"\#(transaction.jws)"}"#, path: "/client/transactions").0))
        // Prometheus has scraped the settled jobs, and holds enough samples for a rate.
        let scraped = try await eventually(timeout: .seconds(60)) {
            let value = try? await api.scalar("sum(receiptq_jobs_processed_total{outcome=\"validated\"})")
            return value == 6
        }
        let logText = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        try #require(scraped, "Prometheus never saw the six validations: \(logText.suffix(2000))")
        // Three more successful scrapes, however long they take on a loaded machine (a scrape that
        // times out is no sample, and a rate needs two): a fixed pause was too short under the full run.
        let successful = "sum_over_time(up{job=\"receiptq\"}[5m])"
        let before = try await api.scalar(successful) ?? 0
        _ = try await eventually(timeout: .seconds(30)) { (try? await api.scalar(successful)).map { $0 >= before + 3 } ?? false }

        let targets = try await api.get("/api/v1/targets")
        let active = (targets["data"] as? [String: Any])?["activeTargets"] as? [[String: Any]] ?? []
        #expect(active.map { $0["health"] as? String } == ["up"], "\(active)")

        // The rules load and evaluate without error; a healthy run fires none of them.
        let rules = try await api.get("/api/v1/rules")
        let groups = (rules["data"] as? [String: Any])?["groups"] as? [[String: Any]] ?? []
        let loaded = groups.flatMap { $0["rules"] as? [[String: Any]] ?? [] }
        // Every alert of the file (Prometheus read them all).
        let file = try String(contentsOf: Self.root.appendingPathComponent("ops/prometheus/alerts.yml"), encoding: .utf8)
        let alertCount = file.split(separator: "\n").filter { $0.trimmingCharacters(in: .whitespaces).hasPrefix("- alert:") }.count
        #expect(alertCount >= 16)
        #expect(loaded.count == alertCount)
        for rule in loaded {
            #expect(rule["health"] as? String == "ok", "\(rule["name"] ?? "?"): \(rule["lastError"] ?? "")")
        }
        let alerts = try await api.get("/api/v1/alerts")
        let firing = (alerts["data"] as? [String: Any])?["alerts"] as? [[String: Any]] ?? []
        #expect(firing.isEmpty, "\(firing)")

        // Every query of the Grafana dashboard, with Grafana's rate interval as a fixed window.
        let dashboard =
            try JSONSerialization.jsonObject(
                with: Data(contentsOf: Self.root.appendingPathComponent("ops/grafana/receiptq-dashboard.json"))) as? [String: Any]
        func expressions(_ panels: [[String: Any]]) -> [String] {
            panels.flatMap { panel in
                ((panel["targets"] as? [[String: Any]]) ?? []).compactMap { $0["expr"] as? String }
                    + expressions(panel["panels"] as? [[String: Any]] ?? [])
            }
        }
        let queries = expressions(dashboard?["panels"] as? [[String: Any]] ?? []).map {
            $0.replacingOccurrences(of: "$__rate_interval", with: "1m")
        }
        #expect(queries.count >= 20)
        // (Scrapes of 5 s: a debug build beside every other suite took over 2 s to answer /metrics.)
        // A scrape that times out on a loaded machine marks every series of the target stale until
        // the next one succeeds, and instant queries of gauges are then empty: a pass right after
        // one is not the dashboard's fault, so up to three passes, each after a successful scrape.
        var withData = 0
        var empty: [String] = []
        for _ in 0..<3 {
            _ = try await eventually(timeout: .seconds(30)) { (try? await api.scalar("up{job=\"receiptq\"}")) == 1 }
            withData = 0
            empty = []
            for query in queries {
                let answer = try await api.query(query)
                #expect(answer.status == "success", "\(query): \(answer.error ?? "")")
                if !answer.result.isEmpty { withData += 1 } else { empty.append(query) }
            }
            if withData >= queries.count - 4 { break }
            // The next pass after another successful scrape (not after a pause that may hold none).
            let scrapes = try await api.scalar(successful) ?? 0
            _ = try await eventually(timeout: .seconds(30)) { (try? await api.scalar(successful)).map { $0 >= scrapes + 1 } ?? false }
        }
        // Only the re-poll rate, the Apple error ratio and the like may be empty on a short happy run.
        #expect(withData >= queries.count - 4, "\(withData) of \(queries.count) dashboard queries returned data; empty: \(empty)")
        // Instant queries of gauges, so again after a successful scrape (see above).
        #expect(try await eventually(timeout: .seconds(30)) { (try? await api.scalar("max(receiptq_live_workers)")) == 1 })
        #expect(try await eventually(timeout: .seconds(30)) { (try? await api.scalar("max(receiptq_circuit_state)")) == 0 })
        let p95 = try await api.scalar(
            "histogram_quantile(0.95, sum by (le) (rate(receiptq_job_latency_seconds_bucket{kind=\"validate\"}[1m])))")
        #expect(p95.map { $0 > 0 && $0 < 10 } == true, "p95 enqueue → done: \(String(describing: p95))")
    }
}

/// Prometheus's HTTP API, through the tests' libcurl client.
struct PrometheusAPI {
    let client: HTTPClient
    let base: String

    func get(_ path: String) async throws -> [String: Any] {
        let response = try await client.send(Curl.HTTPRequest(method: "GET", url: base + path, headers: [], body: []))
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
        return try #require(object, "\(path) answered \(response.status)")
    }

    func query(_ expression: String) async throws -> (status: String?, error: String?, result: [[String: Any]]) {
        var components = URLComponents()
        components.queryItems = [URLQueryItem(name: "query", value: expression)]
        // URLComponents leaves `+` alone, which a query string reads as a space.
        let encoded = (components.percentEncodedQuery ?? "").replacingOccurrences(of: "+", with: "%2B")
        let answer = try await get("/api/v1/query?\(encoded)")
        let result = (answer["data"] as? [String: Any])?["result"] as? [[String: Any]] ?? []
        return (answer["status"] as? String, answer["error"] as? String, result)
    }

    /// The value of a query with one series (nil when it has none or its value is not a number).
    func scalar(_ expression: String) async throws -> Double? {
        let answer = try await query(expression)
        guard answer.result.count == 1, let value = answer.result[0]["value"] as? [Any], value.count == 2 else { return nil }
        return (value[1] as? String).flatMap(Double.init)
    }
}
