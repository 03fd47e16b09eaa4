// Linking the worker's modules makes Glibc's timespec/timeval resolve to CDispatch's copy of the
// header, and MemberImportVisibility then wants that module imported to read tv_sec & co.
import CDispatch
import Foundation
import Glibc

/// CPU time and memory of processes, read from `/proc` (Linux): what the pipeline rows charge to
/// the worker, the mock App Store, Postgres and the bench itself.
enum ProcessStats {
    /// Clock ticks per second of `/proc/<pid>/stat` (100 on Linux).
    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// utime + stime of `pid` in microseconds (all its threads), or nil when it is gone.
    static func cpuMicros(pid: Int32) -> Double? {
        cpuTimes(pid: pid).map { $0.user + $0.system }
    }

    /// utime and stime of `pid` in microseconds (all its threads), from one read: stime is the
    /// kernel's share, its sockets and wake-ups on the process's behalf. Nil when it is gone.
    static func cpuTimes(pid: Int32) -> (user: Double, system: Double)? {
        guard let fields = statFields(pid: pid), fields.count > 14, let user = Double(fields[13]), let system = Double(fields[14])
        else { return nil }
        return (user / ticksPerSecond * 1_000_000, system / ticksPerSecond * 1_000_000)
    }

    /// The parent of `pid`, or nil when it is gone.
    static func parent(of pid: Int32) -> Int32? {
        guard let fields = statFields(pid: pid), fields.count > 3 else { return nil }
        return Int32(fields[3])
    }

    /// The fields of `/proc/<pid>/stat`, numbered like proc(5) minus one (index 0 = pid, 1 = comm).
    private static func statFields(pid: Int32) -> [String]? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // comm may contain spaces and parentheses: split after its closing parenthesis.
        let rest = text[text.index(after: close)...].split(separator: " ").map(String.init)
        return [String(pid), "comm"] + rest
    }

    /// Memory of `pid` from `/proc/<pid>/status`.
    struct Memory {
        /// Resident set size now, KiB.
        var rssKiB: Int
        /// Peak resident set size, KiB.
        var hwmKiB: Int
        /// Threads now.
        var threads: Int
    }

    static func memory(pid: Int32) -> Memory? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        var memory = Memory(rssKiB: 0, hwmKiB: 0, threads: 0)
        for line in text.split(separator: "\n") {
            let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == ":" })
            guard parts.count >= 2, let value = Int(parts[1]) else { continue }
            switch parts[0] {
            case "VmRSS": memory.rssKiB = value
            case "VmHWM": memory.hwmKiB = value
            case "Threads": memory.threads = value
            default: break
            }
        }
        return memory
    }

    /// Context switches of every thread of `pid` (voluntary: it blocked, e.g. on a socket; involuntary: preempted).
    static func contextSwitches(pid: Int32) -> (voluntary: Int, involuntary: Int)? {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return nil }
        var total = (voluntary: 0, involuntary: 0)
        for task in tasks {
            guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8) else { continue }
            for line in text.split(separator: "\n") {
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == ":" })
                guard parts.count >= 2, let value = Int(parts[1]) else { continue }
                if parts[0] == "voluntary_ctxt_switches" { total.voluntary += value }
                if parts[0] == "nonvoluntary_ctxt_switches" { total.involuntary += value }
            }
        }
        return total
    }

    /// CPU microseconds of `parent` and each of its children, by pid (e.g. a postmaster and its backends).
    static func familyCPU(parent: Int32) -> [Int32: Double] {
        var result: [Int32: Double] = [:]
        if let own = cpuMicros(pid: parent) { result[parent] = own }
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return result }
        for entry in entries {
            guard let pid = Int32(entry), pid != parent, Self.parent(of: pid) == parent, let cpu = cpuMicros(pid: pid) else { continue }
            result[pid] = cpu
        }
        return result
    }

    /// CPU the family used between two ``familyCPU(parent:)`` samples: processes that appeared in
    /// between count from zero; processes that exited in between are lost (short-lived ones only).
    static func familyDelta(_ before: [Int32: Double], _ after: [Int32: Double]) -> Double {
        after.reduce(0) { sum, entry in sum + max(0, entry.value - (before[entry.key] ?? 0)) }
    }

    /// This process's CPU (user + system, every thread), microseconds.
    static func selfCPUMicros() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func micros(_ time: timeval) -> Double { Double(time.tv_sec) * 1_000_000 + Double(time.tv_usec) }
        return micros(usage.ru_utime) + micros(usage.ru_stime)
    }
}

/// The whole machine's CPU from `/proc/stat`, to tell a saturated machine from an idle one.
struct MachineCPU {
    var busy: Double = 0
    var iowait: Double = 0
    var steal: Double = 0
    var total: Double = 0

    static func sample() -> MachineCPU {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") })
        else { return MachineCPU() }
        let values = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard values.count >= 8 else { return MachineCPU() }
        // user nice system idle iowait irq softirq steal
        let busy = values[0] + values[1] + values[2] + values[5] + values[6]
        return MachineCPU(busy: busy, iowait: values[4], steal: values[7], total: values[0..<8].reduce(0, +))
    }

    /// Shares of the machine's CPU time between two samples, in percent of all cores.
    static func shares(_ before: MachineCPU, _ after: MachineCPU) -> (busy: Double, iowait: Double, steal: Double) {
        let total = after.total - before.total
        guard total > 0 else { return (.nan, .nan, .nan) }
        return (
            100 * (after.busy - before.busy) / total, 100 * (after.iowait - before.iowait) / total,
            100 * (after.steal - before.steal) / total
        )
    }
}
