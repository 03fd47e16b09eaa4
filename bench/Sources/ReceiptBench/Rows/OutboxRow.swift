import Foundation
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature
import ReceiptWorker

/// `outbox`: what the events outbox costs Postgres per validation — the worker's own store writing
/// the worker's own records, with its events and without them, alternately, on one database.
///
/// Each validation is a new receipt the mock App Store would accept (the pipeline row's: a lifetime
/// purchase and a monthly subscription), planned by the real `JobPlanner` from the mock's answer,
/// so the store writes what the worker writes — a receipt, two purchases, a subscription, the call
/// — and, with events, `receipt.validated` and `subscription.started` with their advisory lock and
/// prior-state read. No App Store, no Redis, no HTTP: only Postgres works during a window, so the
/// numbers are not the CPU-bound pipeline's scheduling noise. `--committers` threads save batches of
/// `--batch` records each in one transaction, as the worker's committers do (group commit,
/// `synchronous_commit` on).
///
/// Rounds alternate which side goes first, so drift (autovacuum, a checkpoint, a growing table)
/// falls on both. The target is the median of the rounds' ratios.
enum OutboxRow: BenchRow {
    static let name = "outbox"
    static let summary = "Postgres CPU per validation with and without the events outbox (the worker's store alone, A/B in rounds)"
    static let services = ["postgres"]
    static let options = [
        OptionSpec(name: "--rounds", takesValue: true, help: "A/B rounds (default 5)"),
        OptionSpec(name: "--validations", takesValue: true, help: "validations per side per round (default 4000)"),
        OptionSpec(name: "--batch", takesValue: true, help: "records per transaction (default 32, about a c100 worker's batch)"),
        OptionSpec(name: "--committers", takesValue: true, help: "threads saving batches at once, each on its own connection (default 2)"),
    ]
    static let targetRatio = 0.15

    /// One side's window: what Postgres did for `validations` records.
    struct Window {
        var validations: Int
        var seconds: Double
        /// CPU of every server process (backends, WAL writer, checkpointer, autovacuum).
        var postgresMicros: Double
        /// CPU of the committers' own backends only.
        var backendMicros: Double
        var walBytes: Double
        var events: Int

        var perValidation: Double { postgresMicros / Double(validations) }
        var backendPerValidation: Double { backendMicros / Double(validations) }
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let rounds = try options.positive("--rounds", default: 5)
        let validations = try options.positive("--validations", default: 4_000)
        let batch = try options.positive("--batch", default: 32)
        let committers = try options.positive("--committers", default: 2)

        let configuration = try AppConfiguration()
        // The schema this build writes, not whatever an earlier build left.
        try ReceiptQueueApp.migrate(configuration)
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench")
        defer { postgres.close() }
        guard let postmaster = PostgresStats.postmasterPID(postgres) else {
            throw BenchFailure(description: "outbox: Postgres must run on this machine (its processes' CPU is the measurement)")
        }
        let bundleID = "com.example.receiptq.bench"
        let (app, _) = try AppAdmin(connection: postgres).addApp(
            name: "bench-outbox-\(UUID().uuidString.prefix(8).lowercased())", bundleID: bundleID, sharedSecret: nil)
        defer { BenchApps.delete([app.id], on: postgres, row: name) }
        FileHandle.standardError.write(Data("outbox: forging the receipt template…\n".utf8))
        let records = try Records(factory: JobFactory(receipt: JobFactory.forgeReceipt(bundleID: bundleID), appID: app.id))

        // Connections and stores made once: both sides run with warm caches and plans.
        let sides = try [false, true].map { events in
            try (0..<committers).map { _ in
                try Committer(connection: PostgresConnection(configuration: configuration.postgres, label: "bench-outbox"), events: events)
            }
        }
        defer { for committer in sides.joined() { committer.connection.close() } }

        var table = TextTable(
            title: "outbox: the worker's store, \(validations) validations per side per round, batches of \(batch), \(committers) committers",
            headers: ["round", "outbox", "validations/s", "pg µs/val", "backends µs/val", "WAL B/val", "events/val"])
        table.notes = [
            "pg µs/val = CPU of every Postgres process over the window ÷ validations; backends = the committers' own backends only",
            "each validation: a new receipt, two purchases, a subscription, the Apple call; with the outbox also 2 events",
        ]
        var windows: [(events: Bool, window: Window)] = []
        var ratios: [Double] = []
        var backendRatios: [Double] = []
        var serial = 0
        // One untimed round first: the tables' and indexes' pages, the plans, the connections' caches.
        for round in 0...rounds {
            var pair: [Bool: Window] = [:]
            for events in round % 2 == 0 ? [true, false] : [false, true] {
                let prepared = try records.make(count: round == 0 ? validations / 4 : validations, from: serial)
                serial += prepared.count
                FileHandle.standardError.write(Data("outbox: round \(round) \(events ? "with" : "without") events…\n".utf8))
                let window = try measure(prepared, batch: batch, committers: sides[events ? 1 : 0], postgres: postgres, postmaster: postmaster)
                guard round > 0 else { continue }
                pair[events] = window
                windows.append((events, window))
                table.add([
                    String(round), events ? "on" : "off", Format.rate(Double(window.validations) / window.seconds),
                    Format.micros(window.perValidation), Format.micros(window.backendPerValidation),
                    Format.rate(window.walBytes / Double(window.validations)),
                    String(format: "%.2f", Double(window.events) / Double(window.validations)),
                ])
            }
            if round == 0 {
                // Statistics of now, not of the emptied tables an earlier row left (their plans scan
                // what has since grown: the history effect issue 20 is about, not the outbox's).
                try postgres.execute("ANALYZE \(BenchApps.tables)")
            }
            if let on = pair[true], let off = pair[false] {
                ratios.append(on.perValidation / off.perValidation - 1)
                backendRatios.append(on.backendPerValidation / off.backendPerValidation - 1)
            }
        }
        let off = median(windows.filter { !$0.events }.map(\.window.perValidation))
        let on = median(windows.filter(\.events).map(\.window.perValidation))
        let ratio = median(ratios)
        let percent = { (value: Double) in String(format: "%+.1f %%", value * 100) }
        table.notes.append(
            "outbox adds \(Format.micros(on - off)) µs of Postgres CPU per validation (medians \(Format.micros(off)) → \(Format.micros(on))); "
                + "ratio per round: median \(percent(ratio)), spread \(percent(ratios.min() ?? .nan)) … \(percent(ratios.max() ?? .nan)) "
                + "(target ≤ +\(Int(targetRatio * 100)) %: \(ratio <= targetRatio ? "met" : "not met")); "
                + "backends alone: median \(percent(median(backendRatios)))")
        print(table.render())

        return [
            "unit": "µs of Postgres CPU per validation", "rounds": rounds, "validations_per_side": validations, "batch": batch,
            "committers": committers, "postgres_us_off": Format.json(off), "postgres_us_on": Format.json(on),
            "added_us": Format.json(on - off), "ratio_median": Format.json(ratio, places: 1000),
            "ratio_min": Format.json(ratios.min() ?? .nan, places: 1000), "ratio_max": Format.json(ratios.max() ?? .nan, places: 1000),
            "backends_ratio_median": Format.json(median(backendRatios), places: 1000), "target_ratio": targetRatio,
            "target_met": ratio <= targetRatio,
            "windows": windows.map { entry in
                [
                    "outbox": entry.events, "validations": entry.window.validations,
                    "validations_per_s": Format.json(Double(entry.window.validations) / entry.window.seconds),
                    "postgres_us": Format.json(entry.window.perValidation), "backends_us": Format.json(entry.window.backendPerValidation),
                    "wal_bytes": Format.json(entry.window.walBytes / Double(entry.window.validations)),
                ] as [String: Any]
            },
        ]
    }

    /// One committer: a connection, its backend's pid and a store on it.
    final class Committer: @unchecked Sendable {
        let connection: PostgresConnection
        let store: PostgresReceiptStore
        let backend: Int32

        init(connection: PostgresConnection, events: Bool) throws {
            self.connection = connection
            store = PostgresReceiptStore(connection: connection, writesEvents: events)
            guard let pid = try connection.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid") else {
                throw BenchFailure(description: "outbox: no backend pid")
            }
            backend = Int32(pid)
        }
    }

    /// Saves `records` in batches from every committer at once; Postgres's counters around it.
    static func measure(
        _ records: [ValidationRecord], batch: Int, committers: [Committer], postgres: PostgresConnection, postmaster: Int32
    ) throws -> Window {
        let batches = stride(from: 0, to: records.count, by: batch).map { Array(records[$0..<min($0 + batch, records.count)]) }
        let eventsBefore = try count(events: records[0].envelope.appID, on: postgres)
        let walBefore = try walPosition(postgres)
        let familyBefore = ProcessStats.familyCPU(parent: postmaster)
        let backendsBefore = committers.map { ProcessStats.cpuMicros(pid: $0.backend) ?? 0 }
        let start = Date()
        let failures = FailureList()
        DispatchQueue.concurrentPerform(iterations: committers.count) { index in
            for batch in stride(from: index, to: batches.count, by: committers.count).map({ batches[$0] }) {
                do {
                    for result in try committers[index].store.save(batch) {
                        if case .failure(let failure) = result { failures.add("\(failure.code): \(failure.message)") }
                    }
                } catch {
                    failures.add("\(error)")
                }
            }
        }
        let seconds = Date().timeIntervalSince(start)
        let backends = zip(committers, backendsBefore).reduce(0) { $0 + max(0, (ProcessStats.cpuMicros(pid: $1.0.backend) ?? 0) - $1.1) }
        let family = ProcessStats.familyDelta(familyBefore, ProcessStats.familyCPU(parent: postmaster))
        if let first = failures.first { throw BenchFailure(description: "outbox: a save failed: \(first)") }
        return Window(
            validations: records.count, seconds: seconds, postgresMicros: family, backendMicros: backends,
            walBytes: try walPosition(postgres) - walBefore,
            events: try count(events: records[0].envelope.appID, on: postgres) - eventsBefore)
    }

    /// The WAL's insert position in bytes: exact, where `pg_stat_wal` trails by up to a second.
    private static func walPosition(_ postgres: PostgresConnection) throws -> Double {
        try postgres.query("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn AS n").rows.first?.double("n") ?? 0
    }

    private static func count(events app: UUID, on postgres: PostgresConnection) throws -> Int {
        try postgres.query("SELECT count(*) AS n FROM events WHERE app_id = \(app)").rows.first?.int("n") ?? 0
    }

    /// The records the worker would store for new receipts: the mock App Store's answer planned by
    /// the real `JobPlanner`.
    struct Records {
        let factory: JobFactory
        let planner = JobPlanner(retryPolicy: RetryPolicy(), now: { Date() })

        func make(count: Int, from first: Int) throws -> [ValidationRecord] {
            var generator = SystemRandomNumberGenerator()
            return try (first..<first + count).map { serial in
                let envelope = try JobEnvelope.decode(factory.makeJob(serial: serial).bytes)
                let receiptData = envelope.payload.purchase?.receiptData ?? ""
                let receipt = try ReceiptDecoder.decode(base64: receiptData)
                let answer = MockAppStore.answer(for: receipt, receiptData: receiptData, environmentName: "Production", excludeOld: false)
                let outcome = ValidationOutcome(
                    verdict: .valid, response: VerifyReceiptResponse(json: .object(answer)),
                    calls: [AppleCall(endpoint: .production, httpStatus: 200, appleStatus: 0, isRetryable: nil, latencyMs: 50, errorCode: nil)],
                    failure: nil, at: Date())
                guard case .store(let record) = planner.plan(envelope, outcome: outcome, using: &generator) else {
                    throw BenchFailure(description: "outbox: the planner did not store job \(serial)")
                }
                return record
            }
        }
    }

    /// Failures of the committers' threads, first one kept for the message.
    final class FailureList: @unchecked Sendable {
        private let lock = NSLock()
        private var messages: [String] = []

        func add(_ message: String) { lock.withLock { messages.append(message) } }
        var first: String? { lock.withLock { messages.first } }
    }
}
