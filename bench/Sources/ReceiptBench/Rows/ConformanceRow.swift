import Foundation
import ReceiptTesting

/// `conformance`: the entitlement conformance suite's long run (issue 45), as `receiptq
/// conformance` plays it — by default 1,000 customers over 365 simulated days under the default
/// faults (duplicated, delayed and reordered notifications), the whole deployment in the command's
/// process on a simulated clock, against scripts/services' Redis and Postgres (in a database of its
/// own, dropped at the end). Records the wall time, customers per second of wall time and the
/// table's totals. A run that is not conformant (exit 1: a wrong answer after convergence, an event
/// missing or duplicated) is recorded as such, not failed: the row measures, the tests judge.
enum ConformanceRow: BenchRow {
    static let name = "conformance"
    static let summary =
        "receiptq conformance: 1,000 customers × 365 simulated days, default faults, whole deployment in process; wall time, customers/s, table totals"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let defaultIterations = 1
    static let options = [
        OptionSpec(name: "--customers", takesValue: true, help: "customers to simulate (default 1000)"),
        OptionSpec(name: "--days", takesValue: true, help: "simulated days (default 365)"),
        OptionSpec(name: "--faults", takesValue: true, help: "none, default or all (default: default)"),
        OptionSpec(name: "--seed", takesValue: true, help: "the run's seed (default 4545, so runs compare)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
    ]

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let customers = try options.positive("--customers", default: 1_000)
        let days = try options.positive("--days", default: 365)
        let faults = options.extra["--faults"] ?? "default"
        let seed = try options.positive("--seed", default: 4_545)
        let receiptq = try PipelineRow.locateReceiptq(options.extra["--receiptq"])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bench-conformance-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let json = directory.appendingPathComponent("run.json")
        let arguments = [
            "conformance", "--customers", String(customers), "--days", String(days), "--faults", faults, "--seed", String(seed), "--json", json.path,
        ]
        FileHandle.standardError.write(Data("conformance: receiptq \(arguments.joined(separator: " "))…\n".utf8))
        let started = Date()
        let child = try ChildProcess(
            executable: receiptq, arguments: arguments, environment: ProcessInfo.processInfo.environment, label: "conformance",
            logDirectory: directory)
        child.waitUntilExit()
        let wall = Date().timeIntervalSince(started)
        let status = child.child.terminationStatus
        // 0: conformant; 1: the run found disagreements (recorded); anything else: it did not run.
        guard status == 0 || status == 1,
            let data = FileManager.default.contents(atPath: json.path),
            let run = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let total = run["total"] as? [String: Any]
        else {
            throw BenchFailure(description: "receiptq conformance exited \(status) without its results:\n\(child.logTail(lines: 30))")
        }
        print((try? String(contentsOf: child.logURL, encoding: .utf8)) ?? "")
        func count(_ key: String) -> Int { total[key] as? Int ?? Int((total[key] as? Double) ?? 0) }
        var table = TextTable(
            title: "conformance: the long run (seed \(seed))",
            headers: ["faults", "customers", "days", "wall s", "customers/s", "answers", "wrong", "late", "missing", "duplicated", "out of order"])
        table.add([
            faults, String(customers), String(days), String(format: "%.1f", wall), String(format: "%.2f", Double(customers) / wall),
            String(count("answers_checked")), String(count("wrong")), String(count("late")), String(count("events_missing")),
            String(count("events_duplicated")), String(count("events_out_of_order")),
        ])
        print(table.render())
        return [
            "customers": customers, "days": days, "faults": faults, "seed": seed, "exit_status": Int(status),
            "conformant": run["conformant"] as? Bool ?? false, "wall_s": Format.json(wall), "run_wall_s": run["wall_s"] ?? NSNull(),
            "customers_per_wall_s": Format.json(Double(customers) / wall, places: 100), "total": total,
            "scenarios": run["scenarios"] ?? [:],
        ]
    }
}
