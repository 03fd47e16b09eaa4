/// `pipeline_scale`: the `pipeline` row with N worker processes on one queue, one Redis and one
/// Postgres, at a fixed concurrency per process: how throughput grows with N on this machine, and
/// which process takes the cores as it stops growing. By default N = 1, 2, 4, 8 at
/// `WORKER_CONCURRENCY` 16 (the default, where one process leaves cores free) and 100 (where
/// one process already keeps both cores busy).
///
/// The same code as ``PipelineRow`` (`--processes`, `--iterations`, `--quiet-load` are its options
/// too); this row only has its own defaults and its own key in `bench/results.json`, so measuring
/// the scaling never replaces the concurrency sweep stored under `pipeline`. Levels are named
/// `p<processes>_c<concurrency>`; each runs `--iterations` times (3), round-robin, after the
/// 1-minute load average fell below `--quiet-load` (1.0; at most `--quiet-wait-seconds`, 900),
/// and the row reports medians.
enum PipelineScaleRow: BenchRow {
    static let name = "pipeline_scale"
    static let summary =
        "pipeline with 1, 2, 4, 8 receiptq work processes on one queue (16, 100 in flight each): validations/s and where the cores go as N grows"
    static let services = PipelineRow.services
    static let products = PipelineRow.products
    static let options = PipelineRow.options
    static let defaultIterations = 3

    static let defaults = PipelineRow.Defaults(
        row: name, concurrencies: "16,100", processes: "1,2,4,8", iterations: defaultIterations, quietLoad: 1.0, profileAt: 0,
        alwaysNameProcesses: true)

    static func run(_ options: BenchOptions) throws -> [String: Any] { try PipelineRow.run(options, defaults: defaults) }
}
