import Foundation

/// `perf record` of running processes, summarised by shared object (and process) and by symbol.
enum PerfProfile {
    static func record(pids: [Int32], seconds: Int, directory: URL) -> [String: Any] {
        guard let perf = ChildProcess.which("perf") else { return ["error": "perf not installed"] }
        let data = directory.appendingPathComponent("perf-\(pids.first ?? 0).data").path
        func attempt(_ pids: [Int32]) -> (status: Int32, output: String) {
            ChildProcess.run(
                perf, ["record", "-F", "999", "-p", pids.map(String.init).joined(separator: ","), "-o", data, "--", "sleep", String(seconds)])
        }
        var recorded = attempt(pids)
        if recorded.status != 0 {
            // Once more, with the processes still running (EPERM: running, not ours). A Postgres
            // backend in the list may have ended since it was read, and perf refuses a gone pid;
            // one failure left no message at all, so the second try is not only for that.
            recorded = attempt(pids.filter { kill($0, 0) == 0 || errno == EPERM })
        }
        guard recorded.status == 0 else {
            return ["error": "perf record failed (status \(recorded.status)): \(recorded.output.suffix(300))"]
        }
        defer { try? FileManager.default.removeItem(atPath: data) }
        var result: [String: Any] = ["seconds": seconds, "frequency_hz": 999]
        // With several processes, split by process too: "comm / dso".
        let keys = pids.count > 1 ? ["comm", "dso"] : ["dso"]
        let byDSO = ChildProcess.run(perf, ["report", "-i", data, "--stdio", "--no-children", "--sort", keys.joined(separator: ",")])
        var samples = 0
        var shares: [String: Double] = [:]
        for line in byDSO.output.split(separator: "\n") {
            if line.hasPrefix("# Samples:") {
                // "# Samples: 4K of event 'cpu-clock:ppp'" or an exact count.
                let token = line.split(separator: " ").dropFirst(2).first.map(String.init) ?? ""
                samples = token.hasSuffix("K") ? Int((Double(token.dropLast()) ?? 0) * 1_000) : Int(token) ?? 0
            }
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count > keys.count, parts[0].hasSuffix("%"), let share = Double(parts[0].dropLast()) else { continue }
            shares[parts[1...keys.count].joined(separator: " / "), default: 0] += share
        }
        result["samples"] = samples
        result["by_dso_pct"] = shares
        let bySymbol = ChildProcess.run(
            perf,
            ["report", "-i", data, "--stdio", "--no-children", "--sort", (keys + ["sym"]).joined(separator: ","), "-q", "--percent-limit", "0.5"])
        var symbols: [(share: Double, dso: String, symbol: String)] = []
        for line in bySymbol.output.split(separator: "\n") {
            // "  4.20%  comm  dso  [.] symbol": the keys, the [.]/[k] marker, then the symbol (may hold spaces).
            let parts = line.split(separator: " ", maxSplits: keys.count + 2, omittingEmptySubsequences: true)
            guard parts.count == keys.count + 3, parts[0].hasSuffix("%"), let share = Double(parts[0].dropLast()) else { continue }
            symbols.append(
                (share, parts[1...keys.count].joined(separator: " / "), String(parts[keys.count + 2]).trimmingCharacters(in: .whitespaces)))
        }
        let demangled = demangle(symbols.map(\.symbol))
        result["top_symbols"] = zip(symbols, demangled).prefix(40).map { item, name in
            ["pct": item.share, "dso": item.dso, "symbol": String(name.prefix(160))] as [String: Any]
        }
        return result
    }

    /// Swift symbols made readable with swift-demangle (others returned as they are).
    static func demangle(_ symbols: [String]) -> [String] {
        guard let tool = ChildProcess.which("swift-demangle") else { return symbols }
        return symbols.map { symbol in
            guard symbol.hasPrefix("$s") || symbol.hasPrefix("_$s") else { return symbol }
            let output = ChildProcess.run(tool, ["--simplified", "--compact", symbol], timeout: 10).output
            let line = output.trimmingCharacters(in: .whitespacesAndNewlines)
            return line.isEmpty ? symbol : line
        }
    }

    /// Notes for a table: the biggest shares by object, then the top symbols.
    static func notes(_ perf: [String: Any], title: String, symbols count: Int = 25) -> [String] {
        if let error = perf["error"] { return ["perf: \(error)"] }
        var notes: [String] = []
        if let shares = perf["by_dso_pct"] as? [String: Double] {
            let top = shares.sorted { $0.value > $1.value }.prefix(16).map { "\($0.key) \(String(format: "%.1f", $0.value))%" }
            notes.append("perf of \(title) (\(perf["samples"] ?? "?") samples), by object: " + top.joined(separator: ", "))
        }
        if let symbols = perf["top_symbols"] as? [[String: Any]] {
            notes.append("perf top symbols:")
            for symbol in symbols.prefix(count) {
                notes.append("  \(symbol["pct"] ?? "?")%  \(symbol["dso"] ?? "?")  \(symbol["symbol"] ?? "?")")
            }
        }
        return notes
    }
}
