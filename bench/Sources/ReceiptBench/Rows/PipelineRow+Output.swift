import Curl
import Foundation
import Hiredis
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import RedisJobQueue

// The pipeline row's tables, medians over runs and per-level detail lines.
extension PipelineRow {
    // MARK: - Output

    static func tableRow(_ key: String, _ level: [String: Any]) -> [String] {
        func value(_ name: String) -> Double { number(level[name]) ?? .nan }
        let run = "\(level["run"] ?? 1)"
        let load = (level["load_average_before"] as? [Double])?.first.map { String(format: "%.2f", $0) } ?? "-"
        guard level["rps"] != nil else {
            return [key, run, "-", "error", Format.rate(value("ideal_rps")), "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", load]
        }
        let byProcess = level["cpu_us_per_job_by_process"] as? [String: Double] ?? [:]
        let machine = level["machine_cpu_pct"] as? [String: Double] ?? [:]
        return [
            key, run, "\(level["worker_threads"] ?? "?")", Format.rate(value("rps")), Format.rate(value("ideal_rps")),
            Format.micros(value("pct_of_ideal")), Format.micros(value("p50_ms")), Format.micros(value("p99_ms")),
            Format.micros(value("cpu_us_per_job")), Format.micros(value("rss_mb")), Format.micros(byProcess["postgres"] ?? .nan),
            Format.micros(byProcess["redis"] ?? .nan), Format.micros(byProcess["mock_appstore"] ?? .nan),
            Format.micros(byProcess["bench"] ?? .nan), Format.micros(machine["busy"] ?? .nan),
            String(format: "%.2f", value("apple_calls_per_validation")), load,
        ]
    }

    /// A JSON number as a Double (results hold Doubles and Ints).
    static func number(_ value: Any?) -> Double? { (value as? Double) ?? (value as? Int).map(Double.init) }

    static let coreGroups = ["worker", "postgres", "redis", "redis_children", "mock_appstore", "bench", "ours", "other"]

    /// One level's runs as one result: a single run as it is; several as the medians of the
    /// headline numbers, a summary of each run, and the full detail of the run with the median rps.
    static func combine(_ runs: [[String: Any]]) -> [String: Any] {
        guard runs.count > 1 else { return runs.first ?? ["error": "not run"] }
        let good = runs.filter { $0["error"] == nil && $0["rps"] != nil }
        guard let first = good.first else { return runs[0].merging(["runs": runs.map(runSummary)]) { _, new in new } }
        func med(_ name: String, places: Double = 10) -> Double { Format.json(median(good.compactMap { number($0[name]) }), places: places) }
        func medCores(_ group: String) -> Double {
            Format.json(median(good.compactMap { number(($0["cores_used"] as? [String: Any])?[group]) }), places: 100)
        }
        let medianRun = good.sorted { (number($0["rps"]) ?? 0) < (number($1["rps"]) ?? 0) }[(good.count - 1) / 2]
        var cores: [String: Any] = [:]
        for group in coreGroups { cores[group] = medCores(group) }
        return [
            "concurrency": first["concurrency"] ?? -1, "processes": first["processes"] ?? -1, "in_flight_max": first["in_flight_max"] ?? -1,
            "ideal_rps": first["ideal_rps"] ?? -1,
            "runs_measured": good.count, "runs_failed": runs.count - good.count,
            "rps": med("rps"), "rps_min": Format.json(good.compactMap { number($0["rps"]) }.min() ?? .nan),
            "rps_max": Format.json(good.compactMap { number($0["rps"]) }.max() ?? .nan),
            "pct_of_ideal": med("pct_of_ideal"), "p50_ms": med("p50_ms", places: 100), "p99_ms": med("p99_ms", places: 100),
            "validated_p50_ms": med("validated_p50_ms", places: 100), "cpu_us_per_job": med("cpu_us_per_job"),
            "cpu_us_per_job_total": med("cpu_us_per_job_total"), "cpu_ceiling_rps": med("cpu_ceiling_rps"),
            "machine_busy_pct": Format.json(median(good.compactMap { number(($0["machine_cpu_pct"] as? [String: Any])?["busy"]) })),
            "cores_used": cores,
            "feeder_kept_up": good.allSatisfy { (($0["queue"] as? [String: Any])?["feeder_kept_up"] as? Bool) == true },
            "all_stored": good.allSatisfy { (($0["durable"] as? [String: Any])?["all_stored"] as? Bool) == true },
            "runs": runs.map(runSummary),
            "median_run": medianRun,
        ]
    }

    /// The numbers of one run that a reader compares across runs.
    static func runSummary(_ level: [String: Any]) -> [String: Any] {
        var summary: [String: Any] = [:]
        for name in [
            "run", "rps", "p50_ms", "p99_ms", "cpu_us_per_job", "cpu_us_per_job_total", "jobs_in_window", "rss_mb", "cores_used",
            "load_average_before", "load_average_after", "load_wait_s", "load_quiet", "error", "detail",
        ] {
            if let value = level[name] { summary[name] = value }
        }
        if let busy = (level["machine_cpu_pct"] as? [String: Any])?["busy"] { summary["machine_busy_pct"] = busy }
        if let queue = level["queue"] as? [String: Any] {
            summary["feeder_kept_up"] = queue["feeder_kept_up"]
            summary["queue_empty_polls_pct"] = queue["empty_polls_pct"]
            summary["queue_mean_length"] = queue["mean_length"]
        }
        if let durable = level["durable"] as? [String: Any] { summary["all_stored"] = durable["all_stored"] }
        return summary
    }

    /// Throughput against the number of processes, per concurrency: the speed-up over the fewest processes.
    static func scaling(levels: [Level], result: [String: Any]) -> [[String: Any]] {
        var rows: [[String: Any]] = []
        for concurrency in Set(levels.map(\.concurrency)).sorted() {
            let group = levels.filter { $0.concurrency == concurrency }
            let base = group.first.flatMap { number((result[$0.key] as? [String: Any])?["rps"]) }
            for level in group {
                guard let entry = result[level.key] as? [String: Any], let rps = number(entry["rps"]) else { continue }
                rows.append([
                    "key": level.key, "processes": level.processes, "concurrency": concurrency, "rps": rps,
                    "speedup": Format.json(base.map { rps / $0 } ?? .nan, places: 100),
                    "p50_ms": entry["p50_ms"] ?? -1, "p99_ms": entry["p99_ms"] ?? -1, "cores_used": entry["cores_used"] ?? [:],
                ])
            }
        }
        return rows
    }

    /// Medians per level and where the cores went: the table that shows the bottleneck moving.
    static func coresTable(levels: [Level], result: [String: Any], runs: Int) -> TextTable {
        var table = TextTable(
            title: "medians over \(runs) run(s) per level; cores = CPU seconds per second in the window (2 cores = the machine)",
            headers: [
                "level", "runs", "rps", "rps range", "×", "p50 ms", "p99 ms", "workers", "postgres", "redis", "mock", "bench", "other",
                "busy %", "load 1m", "feeder",
            ])
        var base: [Int: Double] = [:]
        for level in levels {
            guard let entry = result[level.key] as? [String: Any] else { continue }
            let cores = entry["cores_used"] as? [String: Any] ?? [:]
            func core(_ group: String) -> String { number(cores[group]).map { String(format: "%.2f", $0) } ?? "-" }
            let rps = number(entry["rps"]) ?? .nan
            if base[level.concurrency] == nil { base[level.concurrency] = rps }
            let summaries = entry["runs"] as? [[String: Any]] ?? [entry]
            let loads = summaries.compactMap { ($0["load_average_before"] as? [Double])?.first }
            let range = number(entry["rps_min"]).map { "\(Format.rate($0))–\(Format.rate(number(entry["rps_max"]) ?? .nan))" } ?? "-"
            let busy = number(entry["machine_busy_pct"]) ?? number((entry["machine_cpu_pct"] as? [String: Any])?["busy"]) ?? .nan
            let keptUp = (entry["feeder_kept_up"] as? Bool) ?? ((entry["queue"] as? [String: Any])?["feeder_kept_up"] as? Bool)
            table.add([
                level.key, "\(entry["runs_measured"] ?? 1)", Format.rate(rps), range,
                String(format: "%.2f", rps / (base[level.concurrency] ?? .nan)), Format.micros(number(entry["p50_ms"]) ?? .nan),
                Format.micros(number(entry["p99_ms"]) ?? .nan), core("worker"), core("postgres"), core("redis"), core("mock_appstore"),
                core("bench"), core("other"), Format.micros(busy),
                loads.isEmpty ? "-" : loads.map { String(format: "%.2f", $0) }.joined(separator: "/"),
                keptUp == true ? "ok" : keptUp == false ? "BEHIND" : "?",
            ])
        }
        table.notes = [
            "× = rps ÷ rps of the first process count at the same concurrency; load 1m = the 1-minute load average when each run began",
            "workers = every receiptq work process together; other = busy cores no process of the row accounts for (the machine is shared)",
            "feeder BEHIND = the queue ran empty: that level measured the feeder, not receiptq",
        ]
        return table
    }

    static func indexSummary(_ value: Any?) -> String {
        guard let reads = value as? [String: Double], !reads.isEmpty else { return "-" }
        return reads.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }

    static func stagesSummary(_ value: Any?) -> String {
        guard let stages = value as? [String: Any], !stages.isEmpty else { return "-" }
        let means = Dictionary(uniqueKeysWithValues: stages.compactMap { key, value in (value as? Double).map { (String(key.dropLast(3)), $0) } })
        return WorkerStages.line(means)
    }

    static func levelDetail(_ key: String, _ level: [String: Any]) -> String {
        let redis = level["redis_per_job"] as? [String: Any] ?? [:]
        let postgres = level["postgres_per_job"] as? [String: Any] ?? [:]
        let queue = level["queue"] as? [String: Any] ?? [:]
        let machine = level["machine_cpu_pct"] as? [String: Double] ?? [:]
        let durable = level["durable"] as? [String: Any] ?? [:]
        let cores = level["cores_used"] as? [String: Double] ?? [:]
        let switches = level["worker_context_switches_per_job"] as? [String: Double] ?? [:]
        func text(_ value: Any?) -> String { value.map { "\($0)" } ?? "?" }
        return """
              \(key): \(text(level["jobs_in_window"])) jobs in \(text(level["window_s"])) s; validated_at − enqueued p50/p99 \
            \(text(level["validated_p50_ms"]))/\(text(level["validated_p99_ms"])) ms; App Store call p50/p99 \
            \(text(level["apple_call_p50_ms"]))/\(text(level["apple_call_p99_ms"])) ms; queue mean \(text(queue["mean_length"])) \
            jobs (≈ \(text(queue["mean_wait_ms"])) ms wait, \(text(queue["empty_polls_pct"]))% empty polls, feeder kept up: \
            \(text(queue["feeder_kept_up"])), busy \(text(queue["feeder_busy_pct"]))% of the window)
                per job: Redis \(text(redis["round_trips_of_a_lane"])) lane round trips, \(text(redis["lane_commands"])) lane \
            commands, \(text(redis["net_in_bytes"])) B in; Postgres \(text(postgres["xact_commit"])) commits, \
            \(text(postgres["tup_inserted"])) rows inserted, \(text(postgres["wal_sync"])) WAL fsyncs, \(text(postgres["wal_bytes"])) WAL bytes
                Postgres index tuples read per job: \(indexSummary(postgres["index_tuples_read"]))
                mean ms per job in the worker (reserved → settled; http = libcurl's time for Apple's calls): \(stagesSummary(level["stages_ms"]))
                CPU: \(text(level["cpu_us_per_job_total"])) µs per job in all processes → at most \(text(level["cpu_ceiling_rps"])) jobs/s \
            on this machine's cores
                cores: worker \(text(cores["worker"])), postgres \(text(cores["postgres"])), redis \(text(cores["redis"])), \
            mock \(text(cores["mock_appstore"])), bench \(text(cores["bench"])), others' \(text(cores["other"])); machine busy \(text(machine["busy"]))%, \
            iowait \(text(machine["iowait"]))%, steal \(text(machine["steal"]))%; worker threads \(text(level["worker_threads"])), \
            context switches/job \(text(switches["voluntary"])) voluntary + \(text(switches["involuntary"])) involuntary; \
            durable: \(text(durable["receipts_valid"]))/\(text(durable["jobs_pushed"])) valid in Postgres
            """
    }
}
