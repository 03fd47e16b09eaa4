import CoreMetrics
import Foundation
import Testing

@testable import Telemetry

@Suite("Prometheus exporter")
struct PrometheusExporterTests {
    private func text(_ exporter: PrometheusExporter) -> String { String(decoding: exporter.exposition(), as: UTF8.self) }

    @Test("catalogued metrics carry their help, type and buckets in seconds")
    func catalogued() {
        let exporter = PrometheusExporter()
        Counter(label: MetricCatalog.jobsProcessed, dimensions: [("outcome", "validated")], factory: exporter).increment(by: 3)
        Timer(label: MetricCatalog.appleCallDuration, dimensions: [("endpoint", "sandbox")], factory: exporter)
            .recordMilliseconds(300)
        Gauge(label: MetricCatalog.deadJobs, factory: exporter).record(7)
        let output = text(exporter)
        #expect(output.contains("# HELP receiptq_jobs_processed_total Jobs settled by the workers, by outcome."))
        #expect(output.contains("# TYPE receiptq_jobs_processed_total counter"))
        #expect(output.contains(#"receiptq_jobs_processed_total{outcome="validated"} 3"#))
        #expect(output.contains("# TYPE receiptq_apple_call_duration_seconds histogram"))
        // 300 ms falls in the 0.5 s bucket, not the 0.25 s one.
        #expect(output.contains(#"receiptq_apple_call_duration_seconds_bucket{endpoint="sandbox",le="0.25"} 0"#))
        #expect(output.contains(#"receiptq_apple_call_duration_seconds_bucket{endpoint="sandbox",le="0.5"} 1"#))
        #expect(output.contains(#"receiptq_apple_call_duration_seconds_sum{endpoint="sandbox"} 0.3"#))
        #expect(output.contains("receiptq_dead_jobs 7"))
    }

    @Test("the Swift catalogue and ops/prometheus/metrics.yml name the same metrics, types and labels")
    func catalogueMatchesContract() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let yaml = try String(contentsOf: root.appendingPathComponent("ops/prometheus/metrics.yml"), encoding: .utf8)
        let contract = MetricsContract(yaml: yaml)
        #expect(contract.names == MetricCatalog.entries.map(\.name))
        for entry in MetricCatalog.entries {
            #expect(contract.types[entry.name] == entry.kind.rawValue, "\(entry.name)")
            #expect(contract.labels[entry.name] ?? [:] == entry.labels, "\(entry.name)")
            #expect(contract.help[entry.name] == entry.help, "\(entry.name)")
        }
    }
}

/// Just enough of metrics.yml's fixed layout (two-space indents, flow lists) to compare with the catalogue.
struct MetricsContract {
    var names: [String] = []
    var types: [String: String] = [:]
    var help: [String: String] = [:]
    var labels: [String: [String: [String]?]] = [:]

    init(yaml: String) {
        var current: String?
        var inLabels = false
        // `help: >-` folds the lines below it; a label's `[` may open a list spanning lines.
        var foldingHelp = false
        var openList: (label: String, values: [String])?
        for line in yaml.split(separator: "\n", omittingEmptySubsequences: true) where !line.hasPrefix("#") {
            let indent = line.prefix { $0 == " " }.count
            let text = line.trimmingCharacters(in: .whitespaces)
            func value(after key: String) -> String { String(text.dropFirst(key.count)).trimmingCharacters(in: .whitespaces) }
            func items(_ list: String) -> [String] {
                list.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                    .filter { !$0.isEmpty }
            }
            if let list = openList, let name = current {
                if text == "]" {
                    labels[name]![list.label] = .some(list.values)
                    openList = nil
                } else {
                    openList?.values += items(text)
                }
                continue
            }
            if foldingHelp, indent == 6, let name = current {
                help[name] = (help[name].map { $0.isEmpty ? "" : $0 + " " } ?? "") + text
                continue
            }
            foldingHelp = false
            switch indent {
            case 2:
                let name = String(text.dropLast())
                names.append(name)
                current = name
                inLabels = false
            case 4 where current != nil:
                let name = current!
                if text.hasPrefix("type:") { types[name] = value(after: "type:") }
                if text.hasPrefix("help:") {
                    help[name] = value(after: "help:") == ">-" ? "" : value(after: "help:")
                    foldingHelp = value(after: "help:") == ">-"
                }
                inLabels = text == "labels:"
                if inLabels { labels[name] = [:] }
            case 6 where inLabels && current != nil:
                let parts = text.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                if parts[1] == "[" {
                    openList = (parts[0], [])
                    continue
                }
                let values: [String]? = parts[1] == "null" ? nil : items(parts[1])
                labels[current!]![parts[0]] = .some(values)
            default:
                break
            }
        }
    }
}
