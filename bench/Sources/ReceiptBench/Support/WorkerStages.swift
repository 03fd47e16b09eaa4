import Curl
import Foundation

/// Where a worker's jobs spent their time, read from its `receiptq_job_stage_seconds` histograms
/// (the worker runs with `METRICS_PORT`): sums and counts per stage, so that two scrapes give the
/// mean over the window between them.
struct WorkerStages {
    /// The stages, then `http`: the HTTP exchange inside `call` as libcurl timed it (Apple's calls
    /// for validations, the endpoint's answer for webhook deliveries).
    static let stages = ["call", "http", "commit_wait", "commit", "settle"]

    var sums: [String: Double] = [:]
    var counts: [String: Double] = [:]

    /// Scrapes `http://127.0.0.1:<port>/metrics` of every worker and adds them up; nil when one
    /// cannot be read (the row still reports the rest).
    static func scrape(ports: [Int], kind: String) -> WorkerStages? {
        var total = WorkerStages()
        for port in ports {
            guard let easy = try? CurlEasy(options: CurlOptions()),
                let response = try? easy.perform(HTTPRequest(method: "GET", url: "http://127.0.0.1:\(port)/metrics")), response.status == 200
            else { return nil }
            let one = parse(String(decoding: response.body, as: UTF8.self), kind: kind)
            total.sums.merge(one.sums, uniquingKeysWith: +)
            total.counts.merge(one.counts, uniquingKeysWith: +)
        }
        return total
    }

    static func parse(_ text: String, kind: String) -> WorkerStages {
        var result = WorkerStages()
        let exchange = kind == "webhook" ? "receiptq_webhook_attempt_duration_seconds" : "receiptq_apple_call_duration_seconds"
        for line in text.split(separator: "\n") {
            guard let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
            let stage: String
            if line.hasPrefix("receiptq_job_stage_seconds_"), line.contains("kind=\"\(kind)\""),
                let named = stages.first(where: { line.contains("stage=\"\($0)\"") })
            {
                stage = named
            } else if line.hasPrefix(exchange + "_sum") || line.hasPrefix(exchange + "_count") {
                stage = "http"
            } else {
                continue
            }
            if line.contains("_sum") {
                result.sums[stage, default: 0] += value
            } else if line.contains("_count") {
                result.counts[stage, default: 0] += value
            }
        }
        return result
    }

    /// Mean milliseconds per stage over what was recorded since `before` (everything when nil).
    func meanMs(since before: WorkerStages? = nil) -> [String: Double] {
        var means: [String: Double] = [:]
        for stage in Self.stages {
            let count = (counts[stage] ?? 0) - (before?.counts[stage] ?? 0)
            guard count > 0 else { continue }
            means[stage] = ((sums[stage] ?? 0) - (before?.sums[stage] ?? 0)) / count * 1000
        }
        return means
    }

    /// The means as JSON fields (`<stage>_ms`).
    static func json(_ means: [String: Double]) -> [String: Any] {
        Dictionary(uniqueKeysWithValues: means.map { ("\($0.key)_ms", Format.json($0.value, places: 100)) })
    }

    /// "call 51.8 · http 51.8 · commit wait 3.4 · …" for a table's notes.
    static func line(_ means: [String: Double]) -> String {
        stages.map { "\($0.replacingOccurrences(of: "_", with: " ")) \(means[$0].map { Format.micros($0) } ?? "-")" }.joined(separator: " · ")
    }
}
