/// `import`: what the batch endpoint of bulk imports accepts — the `ingest` row's server, receipts
/// and apps, with its single POSTs and POSTs of `--batch-items` (100) receipts each to
/// `…/receipts/batch` in alternating runs: items/s accepted in batches against the single
/// endpoint's requests/s on the same machine, in the same run (target ≥ 3×). Every answered item
/// must be a job in the import queue after its run. Without the Python peer, the stage timing or
/// the profile (the `ingest` row's options turn them back on); 2,000 receipts by default.
///
/// The batch series posts as apps of its own, so neither series is answered duplicates of the
/// other's pairs. What an import costs live validations is the `import_live` row.
enum ImportRow: BenchRow {
    static let name = "import"
    static let summary =
        "bulk import: receipts/s accepted by POST …/receipts/batch (100 a call) against the single POST's req/s, same server, same run"
    static let services = IngestRow.services
    static let products = IngestRow.products
    static let packages = IngestRow.packages
    static let defaultIterations = IngestRow.defaultIterations
    static let options = IngestRow.options

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        var options = options
        for (flag, value) in [("--batch-items", "100"), ("--receipts", "2000"), ("--stage-samples", "0"), ("--profile-seconds", "0")]
        where options.extra[flag] == nil {
            options.extra[flag] = value
        }
        if options.extra["--peer-processes"] == nil { options.extra["--no-peer"] = "" }
        return try IngestRow.run(options)
    }
}
