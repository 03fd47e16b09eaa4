import Foundation
import ReceiptCore
import ReceiptScheduler
import Synchronization

// The retention row's table and JSON: size and CPU day 30 ÷ day 7, the sweeps, the stalls.
extension RetentionRow {
    static func summarize(
        snapshots: [String: [String: Any]], levels: [Level], days: Int, sweeper: Sweeper, observations: [ResultWatcher.Observation]
    ) -> [String: Any] {
        var result: [String: Any] = [:]
        var targets: [String: Any] = [:]
        // One day's 10 s window is one sample on a shared machine (±20 % seen between two
        // windows a day apart): the CPU compared is the median of the windows of three days.
        func median(_ range: ClosedRange<Int>) -> Double? {
            let values = levels.filter { range.contains($0.day) && $0.postgres.isFinite }.map(\.postgres).sorted()
            return values.isEmpty ? nil : values[values.count / 2]
        }
        let ranges = ["week": 6...8, "end": (days - 2)...days]
        var table = TextTable(
            title: "retention: database size and Postgres CPU per validation (median of the days' windows)",
            headers: ["when", "day", "database MB", "pg µs/job", "days", "windows", "ledger rows"])
        var cpus: [String: Double] = [:]
        for when in ["week", "end"] {
            guard var s = snapshots[when], let range = ranges[when] else { continue }
            let cpu = median(range)
            cpus[when] = cpu
            s["postgres_cpu_us_per_job_median"] = Format.json(cpu ?? -1)
            s["median_of_days"] = "\(range.lowerBound)-\(range.upperBound)"
            result[when] = s
            table.add([
                when, "\(s["day"] ?? "?")", String(format: "%.1f", Double(s["database_bytes"] as? Int ?? -1) / 1e6),
                "\(Format.json(cpu ?? -1))", "\(range.lowerBound)–\(range.upperBound)", "\(levels.filter { range.contains($0.day) }.count)",
                "\(s["ledger_rows"] ?? "?")",
            ])
        }
        result["days"] = levels.map {
            ["day": $0.day, "postgres_cpu_us_per_job": Format.json($0.postgres), "rps": Format.json($0.rps), "load_1m": $0.load] as [String: Any]
        }
        if let w = snapshots["week"]?["database_bytes"] as? Int, let e = snapshots["end"]?["database_bytes"] as? Int,
            let wc = cpus["week"], let ec = cpus["end"]
        {
            let size = Double(e) / Double(w)
            let cpu = ec / wc
            result["end_over_week"] = ["database_size": Format.json(size, places: 100), "postgres_cpu_us_per_job": Format.json(cpu, places: 100)]
            targets["within_1.1x"] = ["value": Format.json(max(size, cpu), places: 100), "met": max(size, cpu) <= 1.1]
            table.notes.append(
                "end ÷ week: database size \(Format.json(size, places: 100))×, Postgres CPU per validation \(Format.json(cpu, places: 100))×")
        }

        // The sweeps, and what ran while the validations were in flight.
        let steps = sweeper.rows.steps.withLock { $0 }
        let reports = sweeper.reports.withLock { $0 }
        func longest(_ kind: Step.Kind, dropping: Bool = false) -> Double {
            steps.filter { $0.kind == kind && (!dropping || $0.count > 0) }.map { Double($0.end &- $0.start) / 1e6 }.max() ?? 0
        }
        let dropped = steps.filter { $0.kind == .drop }.reduce(0) { $0 + $1.count }
        let blocked = sweeper.longestBlocked.withLock { $0 }
        let ownWait = sweeper.longestOwnWait.withLock { $0 }
        result["sweeps"] = [
            "runs": reports.count, "longest_ms": Format.json(reports.map(\.ms).max() ?? 0),
            "partitions_created": reports.reduce(0) { $0 + $1.report.partitionsCreated },
            "partitions_dropped": dropped,
            "rows_deleted": Dictionary(
                grouping: reports.flatMap { $0.report.deleted.map { ($0.key.rawValue, $0.value) } }, by: \.0
            ).mapValues { $0.reduce(0) { $0 + $1.1 } },
            "longest_step_ms": [
                "delete_batch": Format.json(longest(.delete)), "create_partitions": Format.json(longest(.create)),
                "drop_partitions_that_dropped": Format.json(longest(.drop, dropping: true)),
            ],
            "error": sweeper.firstError.withLock { $0 } ?? "",
        ]
        result["locks"] = [
            "longest_wait_caused_ms": Format.json(blocked.ms), "that_lock": blocked.lock,
            "longest_wait_of_the_sweep_ms": Format.json(ownWait), "method": "pg_locks.waitstart sampled every 10 ms (pg_blocking_pids)",
        ]
        var stallTable = TextTable(
            title: "retention: sampled validations (enqueue → result after commit), by what ran meanwhile",
            headers: ["while", "validations", "p50 ms", "p99 ms", "max ms"])
        var stallJSON: [String: Any] = [:]
        let buckets = stalls(observations, steps: steps)
        for key in ["outside_steps", "during_steps", "during_drops"] {
            guard let d = buckets[key] else { continue }
            let ms = { (value: Double) in Format.json(value / 1_000, places: 100) }
            stallJSON[key] = ["count": d.count, "p50_ms": ms(d.p50), "p99_ms": ms(d.p99), "max_ms": ms(d.max)]
            stallTable.add([key.replacingOccurrences(of: "_", with: " "), "\(d.count)", "\(ms(d.p50))", "\(ms(d.p99))", "\(ms(d.max))"])
        }
        result["validations"] = stallJSON
        // A stall is what a validation waited for a lock the sweep held: the longest such wait.
        targets["no_stall_over_100ms"] = ["value": Format.json(blocked.ms), "met": blocked.ms <= 100]
        result["targets"] = targets
        stallTable.notes.append(
            "\(reports.count) sweeps under traffic (longest \(Int(reports.map(\.ms).max() ?? 0)) ms), \(dropped) partitions dropped "
                + "(longest drop step \(Format.json(longest(.drop, dropping: true))) ms)")
        stallTable.notes.append(
            "longest lock wait the sweep caused: \(Format.json(blocked.ms)) ms (\(blocked.lock.isEmpty ? "none seen" : blocked.lock)); "
                + "the sweep's own longest wait \(Format.json(ownWait)) ms")
        print(table.render())
        print(stallTable.render())
        return result
    }
}
