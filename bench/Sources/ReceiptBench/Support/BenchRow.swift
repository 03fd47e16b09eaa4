import Foundation

/// One row of `scripts/bench`: a named workload that prints a table and returns its JSON.
///
/// To add a row: write `Rows/<Name>Row.swift` with a type conforming to this protocol, add it to
/// ``BenchRows/all`` (Rows/BenchRows.swift), and list the servers it needs in ``services`` (scripts/bench starts
/// them with `scripts/services start` and exports `.local/env.sh` before running the row).
protocol BenchRow {
    /// The command-line name and the key in `bench/results.json`, e.g. `receipt`.
    static var name: String { get }
    /// One line for `receiptq-bench list` and `--help`.
    static var summary: String { get }
    /// Servers the row needs from `scripts/services`: `redis`, `postgres`; empty for none.
    static var services: [String] { get }
    /// Other products of the main package the row runs (e.g. `receiptq`); scripts/bench builds them in release, next to receiptq-bench.
    static var products: [String] { get }
    /// Debian packages of the tools the row runs (e.g. `wrk`); scripts/bench installs them with scripts/setup.
    static var packages: [String] { get }
    /// Row-specific options beyond the common ones, for `--help` and argument checking.
    static var options: [OptionSpec] { get }
    /// Default samples per workload when `--iterations` is absent.
    static var defaultIterations: Int { get }

    /// Runs the row: prints its table(s) and returns the JSON object stored under ``name``. A result
    /// with `"partial": true` (a subset of the row's workloads) is printed but never written.
    static func run(_ options: BenchOptions) throws -> [String: Any]
}

extension BenchRow {
    static var services: [String] { [] }
    static var products: [String] { [] }
    static var packages: [String] { [] }
    static var options: [OptionSpec] { [] }
    static var defaultIterations: Int { 2_000 }
}

/// A row-specific option: `--name VALUE`, or a flag `--name`.
struct OptionSpec {
    var name: String
    var takesValue: Bool
    var help: String
}

/// Parsed command line: the common options every row honours, plus row-specific ones.
struct BenchOptions {
    /// Timed samples per workload (per item, for corpus workloads).
    var iterations: Int?
    /// Untimed runs before sampling; default: a tenth of the iterations, at least 20.
    var warmup: Int?
    /// Where to merge the row's results (`bench/results.json` from scripts/bench); nil: print only.
    var jsonPath: String?
    /// Print per-item tables too.
    var detail = false
    /// Row-specific `--name value` options; flags map to "".
    var extra: [String: String] = [:]

    func iterations(default value: Int) -> Int { iterations ?? value }
    func warmup(forIterations iterations: Int) -> Int { warmup ?? max(20, iterations / 10) }
    func has(_ flag: String) -> Bool { extra[flag] != nil }

    /// A row option that must be a positive integer, `fallback` when absent.
    func positive(_ flag: String, default fallback: Int) throws -> Int {
        guard let text = extra[flag] else { return fallback }
        guard let value = Int(text), value > 0 else { throw BenchFailure(description: "\(flag) needs a positive integer, not \(text)") }
        return value
    }

    /// A row option that is a comma-separated list of positive integers (e.g. concurrencies).
    func positiveList(_ flag: String, default fallback: String) throws -> [Int] {
        try (extra[flag] ?? fallback).split(separator: ",").map { text -> Int in
            guard let value = Int(text.trimmingCharacters(in: .whitespaces)), value > 0 else {
                throw BenchFailure(description: "\(flag) needs positive integers, not \(text)")
            }
            return value
        }
    }

    struct UsageError: Error, CustomStringConvertible {
        var description: String
    }

    static let common: [OptionSpec] = [
        OptionSpec(name: "--iterations", takesValue: true, help: "timed samples per workload (per item for a corpus)"),
        OptionSpec(name: "--warmup", takesValue: true, help: "untimed runs first (default: iterations/10, at least 20)"),
        OptionSpec(name: "--json", takesValue: true, help: "merge results into this JSON file under the row's key"),
        OptionSpec(name: "--detail", takesValue: false, help: "also print per-item tables"),
    ]

    /// Parses `arguments` (after the row name) against the common options and `rowOptions`.
    static func parse(_ arguments: [String], rowOptions: [OptionSpec]) throws -> BenchOptions {
        var options = BenchOptions()
        let specs = common + rowOptions
        var index = 0
        while index < arguments.count {
            var argument = arguments[index]
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                inlineValue = String(argument[argument.index(after: equals)...])
                argument = String(argument[..<equals])
            }
            guard let spec = specs.first(where: { $0.name == argument }) else {
                throw UsageError(description: "unknown option \(arguments[index])")
            }
            var value = ""
            if spec.takesValue {
                if let inlineValue {
                    value = inlineValue
                } else {
                    index += 1
                    guard index < arguments.count else { throw UsageError(description: "\(argument) needs a value") }
                    value = arguments[index]
                }
            }
            switch argument {
            case "--iterations", "--warmup":
                guard let number = Int(value), number >= (argument == "--warmup" ? 0 : 1) else {
                    throw UsageError(description: "\(argument) needs a positive integer, not \(value)")
                }
                if argument == "--iterations" { options.iterations = number } else { options.warmup = number }
            case "--json": options.jsonPath = value
            case "--detail": options.detail = true
            default: options.extra[argument] = value
            }
            index += 1
        }
        return options
    }
}

/// Why a row could not run or measure (setup, a server, a check on its own results): printed, and
/// the row fails.
struct BenchFailure: Error, CustomStringConvertible {
    var description: String
}
