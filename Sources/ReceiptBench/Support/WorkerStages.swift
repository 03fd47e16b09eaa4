import Curl
import Foundation

/// Where a worker's jobs spent their time, read from its `receiptq_job_stage_seconds` histograms
/// (the worker runs with `METRICS_PORT`): the mean per stage of every job it settled.
struct WorkerStages {
    /// Mean milliseconds per stage (`call`, `commit_wait`, `commit`, `settle`), `http` (the HTTP
    /// exchange inside `call`, as libcurl timed it), and `jobs`.
    var meanMs: [String: Double] = [:]
    var jobs = 0

    static let stages = ["call", "http", "commit_wait", "commit", "settle"]

    /// Scrapes `http://127.0.0.1:port/metrics` once; nil when it cannot (the row still reports the rest).
    static func scrape(port: Int, kind: String) -> WorkerStages? {
        guard let easy = try? CurlEasy(options: CurlOptions()),
            let response = try? easy.perform(HTTPRequest(method: "GET", url: "http://127.0.0.1:\(port)/metrics")), response.status == 200
        else { return nil }
        return parse(String(decoding: response.body, as: UTF8.self), kind: kind)
    }

    static func parse(_ text: String, kind: String) -> WorkerStages {
        var sums: [String: Double] = [:]
        var counts: [String: Double] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("receiptq_job_stage_seconds_") && line.contains("kind=\"\(kind)\"") {
            guard let stage = stages.filter({ $0 != "http" }).first(where: { line.contains("stage=\"\($0)\"") }),
                let value = line.split(separator: " ").last.flatMap({ Double($0) })
            else { continue }
            if line.hasPrefix("receiptq_job_stage_seconds_sum") { sums[stage] = value }
            if line.hasPrefix("receiptq_job_stage_seconds_count") { counts[stage] = value }
        }
        var result = WorkerStages()
        // The HTTP exchange alone (libcurl's total time), inside `call`.
        let exchange = kind == "webhook" ? "receiptq_webhook_attempt_duration_seconds" : "receiptq_apple_call_duration_seconds"
        var exchangeSum = 0.0
        var exchangeCount = 0.0
        for line in text.split(separator: "\n") where line.hasPrefix(exchange + "_sum") || line.hasPrefix(exchange + "_count") {
            guard let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
            if line.hasPrefix(exchange + "_sum") { exchangeSum += value } else { exchangeCount += value }
        }
        if exchangeCount > 0 { result.meanMs["http"] = exchangeSum / exchangeCount * 1000 }
        for stage in stages {
            guard let sum = sums[stage], let count = counts[stage], count > 0 else { continue }
            result.meanMs[stage] = sum / count * 1000
            result.jobs = max(result.jobs, Int(count))
        }
        return result
    }

    /// The stages as JSON fields (`<stage>_ms`).
    var json: [String: Any] { Dictionary(uniqueKeysWithValues: meanMs.map { ("\($0.key)_ms", Format.json($0.value, places: 100)) }) }
}
