import Foundation

/// Per-operation timings of one workload, in nanoseconds, in sampling order.
struct Samples {
    var cpu: [UInt64] = []
    var wall: [UInt64] = []

    init(capacity: Int = 0) {
        cpu.reserveCapacity(capacity)
        wall.reserveCapacity(capacity)
    }

    var count: Int { cpu.count }
}

/// The median of the finite values (the mean of the middle two for an even count); nan when there
/// is none. The rows' one definition, for medians over runs and rounds.
func median(_ values: [Double]) -> Double {
    let sorted = values.filter(\.isFinite).sorted()
    guard !sorted.isEmpty else { return .nan }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// Order statistics of a sample set, in microseconds.
struct Distribution {
    var count: Int
    var p10: Double
    var p50: Double
    var p90: Double
    var p99: Double
    var min: Double
    var max: Double
    var mean: Double

    /// Nearest-rank percentiles (no interpolation: every reported value was really observed).
    init(nanoseconds values: [UInt64]) {
        let sorted = values.sorted()
        count = sorted.count
        func rank(_ p: Double) -> Double {
            guard !sorted.isEmpty else { return .nan }
            let index = Swift.min(sorted.count - 1, Swift.max(0, Int((p * Double(sorted.count)).rounded(.up)) - 1))
            return Double(sorted[index]) / 1_000
        }
        p10 = rank(0.10)
        p50 = rank(0.50)
        p90 = rank(0.90)
        p99 = rank(0.99)
        min = sorted.first.map { Double($0) / 1_000 } ?? .nan
        max = sorted.last.map { Double($0) / 1_000 } ?? .nan
        mean = sorted.isEmpty ? .nan : Double(sorted.reduce(0, +)) / Double(sorted.count) / 1_000
    }

    /// Builds a distribution directly from values (e.g. the per-receipt medians of a corpus).
    init(microseconds values: [Double]) {
        self.init(nanoseconds: values.map { UInt64(Swift.max(0, $0 * 1_000).rounded()) })
    }

    /// Operations per second one core sustains at the median.
    var opsPerSecond: Double { p50 > 0 ? 1_000_000 / p50 : .nan }
}

/// Runs operations one at a time and times each with both clocks.
enum Sampler {
    /// Times `body` `iterations` times after `warmup` untimed runs.
    static func measure(warmup: Int, iterations: Int, _ body: () throws -> Void) rethrows -> Samples {
        try measureRoundRobin([()], warmup: warmup, iterations: iterations) { _ in try body() }[0]
    }

    /// Times `body(item)` `iterations` times per item, visiting the items in turn (a, b, c, a, b, c, …)
    /// so that drift from the machine's other load spreads evenly over them, and so caches see a
    /// mix of receipts as a server would.
    static func measureRoundRobin<Item>(
        _ items: [Item], warmup: Int, iterations: Int, _ body: (Item) throws -> Void
    ) rethrows -> [Samples] {
        for _ in 0..<warmup {
            for item in items { try body(item) }
        }
        var samples = items.map { _ in Samples(capacity: iterations) }
        for _ in 0..<iterations {
            for (index, item) in items.enumerated() {
                let wall0 = BenchClock.wall()
                let cpu0 = BenchClock.threadCPU()
                try body(item)
                let cpu1 = BenchClock.threadCPU()
                let wall1 = BenchClock.wall()
                samples[index].cpu.append(cpu1 &- cpu0)
                samples[index].wall.append(wall1 &- wall0)
            }
        }
        return samples
    }

    /// The median cost of reading the two clocks around an empty body: what every sample includes.
    static func timerOverhead() -> Distribution {
        Distribution(nanoseconds: measure(warmup: 1_000, iterations: 10_000) {}.cpu)
    }
}
