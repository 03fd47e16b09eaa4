import Foundation
import ReceiptTesting

/// What a number was measured on: stored with every row, since a 2-core shared machine's numbers
/// mean little without it.
enum Machine {
    static func info() -> [String: Any] {
        var info: [String: Any] = [
            "nproc": ProcessInfo.processInfo.activeProcessorCount,
            "cpu_model": cpuModel() ?? "unknown",
            "kernel": kernel(),
            "load_average": loadAverage(),
            "date": ISO8601DateFormatter().string(from: Date()),
            "build": buildConfiguration,
            "swift": ProcessInfo.processInfo.environment["RECEIPTQ_BENCH_SWIFT_VERSION"] ?? "unknown",
        ]
        if let commit = git(["rev-parse", "HEAD"]) { info["git_commit"] = commit }
        if let status = git(["status", "--porcelain", "--untracked-files=no"]) { info["git_dirty"] = !status.isEmpty }
        return info
    }

    /// The one-line summary printed above the tables.
    static func summary(_ info: [String: Any]) -> String {
        let load = (info["load_average"] as? [Double])?.map { String(format: "%.2f", $0) }.joined(separator: " ") ?? "?"
        let commit = (info["git_commit"] as? String).map { String($0.prefix(10)) } ?? "?"
        let dirty = (info["git_dirty"] as? Bool) == true ? "+dirty" : ""
        return "machine: \(info["nproc"] ?? "?") × \(info["cpu_model"] ?? "?"), load \(load), "
            + "\(info["build"] ?? "?") build, commit \(commit)\(dirty), \(info["date"] ?? "")"
    }

    #if DEBUG
    static let buildConfiguration = "debug"
    #else
    static let buildConfiguration = "release"
    #endif

    private static func cpuModel() -> String? {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    static func loadAverage() -> [Double] {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return [] }
        return text.split(separator: " ").prefix(3).compactMap { Double($0) }
    }

    private static func kernel() -> String {
        var name = utsname()
        uname(&name)
        return withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    /// Runs git in the current directory (scripts/bench runs from the repository root); nil if unavailable.
    private static func git(_ arguments: [String]) -> String? {
        guard let result = try? ReceiptTesting.ChildProcess.run(["git"] + arguments, stderr: .null), result.status == 0 else {
            return nil
        }
        return String(decoding: result.output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Peak resident set size of this process so far, in KiB.
    static func maxRSSKiB() -> Int {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Int(usage.ru_maxrss)
    }
}
