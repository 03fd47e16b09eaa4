import DevTools
import Foundation
import Libpq
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// `receiptq import` as a process against a running system: killed with SIGKILL halfway and
/// resumed, every receipt of the file ends validated exactly once, and the lines it refused are
/// listed by number.
@Suite("receiptq import: checkpoint, kill -9 and --resume", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct ImportCommandTests {
    static let binary = ReceiptqExecutable.url

    /// Runs `receiptq` off the cooperative pool: the in-process API it posts to needs that pool.
    static func receiptq(
        _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment
    ) async throws -> (status: Int32, output: String) {
        try await offload { try runProcess(binary, arguments, environment: environment) }
    }

    /// A fresh directory for one test's files (the caller removes it).
    static func scratchDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rq-import-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A receipt of the system's app signed by a chain that is not Apple's: the API answers it 402.
    static func forgery(of system: TestSystem) throws -> String {
        let stranger = try TestCertificateAuthority.generate(name: "Not Apple Root CA")
        return Data(try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: system.app.bundleID), authority: stranger))
            .base64EncodedString()
    }

    /// Receipts in the killed-and-resumed history: 1,200 in CI (forged, posted and validated by a
    /// debug build on two shared cores, ~30 s); `RECEIPTQ_IMPORT_TEST_RECEIPTS=50000` runs the
    /// issue's full size (see bench/README.md for its last run).
    static let historySize = ProcessInfo.processInfo.environment["RECEIPTQ_IMPORT_TEST_RECEIPTS"].flatMap(Int.init).map { max(100, $0) } ?? 1_200

    @Test("An NDJSON history killed halfway and resumed: every line accepted or listed once, every receipt validated exactly once")
    func killedAndResumed() async throws {
        let receipts = Self.historySize
        // The import alone on the workers, without an Apple budget (ImportLaneTests has that).
        let system = try await TestSystem.start(
            environment: ["WORKER_CONCURRENCY": "32", "IMPORT_SHARE_PERCENT": "100", "IMPORT_RATE_PER_SECOND": "0"])
        let patience = Duration.seconds(120 + receipts / 50)
        defer { Task { await system.stop() } }
        let directory = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }

        // The file: receipts with a user each; a blank line, two broken lines and a forgery at known places.
        let forged = try Self.forgery(of: system)
        var lines: [String] = []
        var expectedRejects: [Int: Int] = [:]  // line → status
        for index in 0..<receipts {
            switch lines.count + 1 {
            case 10: lines.append("")
            case 250:
                lines.append("{not json")
                expectedRejects[250] = 422
            case 600:
                lines.append(#"{"user_identifier":"no receipt"}"#)
                expectedRejects[600] = 422
            case 900:
                lines.append(#"{"receipt":"\#(forged)"}"#)
                expectedRejects[900] = 402
            default: break
            }
            let (receipt, _) = try system.forgeReceipt()
            lines.append(#"{"receipt":"\#(receipt)","user_identifier":"history-\#(index)"}"#)
        }
        let file = directory.appendingPathComponent("history.ndjson")
        try (lines.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
        let checkpoint = URL(fileURLWithPath: file.path + ".import.json")
        let rejects = URL(fileURLWithPath: file.path + ".rejects.ndjson")
        var environment = ProcessInfo.processInfo.environment
        environment["LOG_LEVEL"] = "warning"
        let arguments = [
            "import", file.path, "--api", "http://127.0.0.1:\(system.apiPort)", "--token", system.token, "--batch-size", "40",
        ]

        // First run: killed once a third of the file is checkpointed.
        let first = try startProcess(Self.binary, arguments, environment: environment, standardError: directory.appendingPathComponent("first.err"))
        func lastLine() -> Int {
            guard let data = try? Data(contentsOf: checkpoint), let value = try? JSONValue.parse(Array(data)) else { return 0 }
            return value["last_line"]?.intValue ?? 0
        }
        _ = try await eventually(timeout: patience, interval: .milliseconds(20)) { lastLine() >= lines.count / 3 || !first.isRunning }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        let killedAt = lastLine()
        let importID = try JSONValue.parse(Array(Data(contentsOf: checkpoint)))["import_id"]?.stringValue
        #expect(importID.map { $0 == $0.lowercased() && UUID(uuidString: $0) != nil } == true, "canonical import id: \(importID ?? "none")")
        #expect(killedAt >= lines.count / 3 && killedAt < lines.count, "killed halfway (checkpoint at line \(killedAt) of \(lines.count))")

        // Without --resume it refuses to start over on top of the checkpoint. Each run waits on a
        // thread of its own: a blocking wait would hold one of the two cooperative threads every
        // other test of the run needs for as long as the import takes.
        let refused = try await Self.receiptq(arguments, environment: environment)
        #expect(refused.status != 0)
        #expect(refused.output.contains("--resume"))

        let resumed = try await Self.receiptq(arguments + ["--resume"], environment: environment)
        #expect(resumed.status == 0, "\(resumed.output.suffix(2_000))")
        #expect(resumed.output.contains("done"))
        #expect(resumed.output.contains("fraud: 1"))
        #expect(resumed.output.contains("invalid: 2"))
        #expect(!resumed.output.contains(forged.prefix(40)), "no receipt in the output")

        // The rejects: each refused line once, by number, and nothing of its content.
        let listed = try String(contentsOf: rejects, encoding: .utf8).split(separator: "\n").compactMap {
            try? JSONValue.parse(Array($0.utf8))
        }
        #expect(Dictionary(listed.map { ($0["line"]?.intValue ?? 0, $0["status"]?.intValue ?? 0) }, uniquingKeysWith: { $1 }) == expectedRejects)
        #expect(listed.count == expectedRejects.count)

        // Postgres: every receipt once, all validated (the forgery stored as fraud); the kill sent
        // at most one batch twice, and idempotency made its items duplicates.
        let pg = try system.postgres()
        defer { pg.close() }
        let settled = try await eventually(timeout: patience) {
            try await pg.query(
                "SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id) AND status IN ('valid', 'fraud')"
            ).rows.first?.int("n") == receipts + 1
        }
        #expect(settled)
        let row = try #require(
            try await pg.query(
                """
                SELECT count(*) AS n, count(DISTINCT user_identifier) AS users, count(*) FILTER (WHERE status = 'valid') AS valid
                FROM receipts WHERE app_id = \(system.app.id)
                """
            ).rows.first)
        #expect(row.int("n") == receipts + 1)
        #expect(row.int("users") == receipts)
        #expect(row.int("valid") == receipts)
    }

    @Test("A forgery imported again is counted as fraud, not as a duplicate: the summary agrees with the rejects file")
    func forgeryImportedAgain() async throws {
        // What a resumed import meets when the kill fell between a batch's answer and its
        // checkpoint: the batch is sent again, and the API answers its forgery as a repeated 402.
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let directory = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (genuine, _) = try system.forgeReceipt()
        let forged = try Self.forgery(of: system)
        let file = directory.appendingPathComponent("history.txt")
        try "\(genuine)\n\(forged)\n".write(to: file, atomically: true, encoding: .utf8)
        let arguments = ["import", file.path, "--api", "http://127.0.0.1:\(system.apiPort)", "--token", system.token]
        var outputs: [String] = []
        for _ in 0..<2 {
            let run = try await Self.receiptq(arguments)
            #expect(run.status == 0, "\(run.output)")
            outputs.append(run.output)
            let rejects = try String(contentsOfFile: file.path + ".rejects.ndjson", encoding: .utf8).split(separator: "\n")
            #expect(rejects.count == 1 && rejects.first?.contains(#""status":402"#) == true, "\(rejects)")
            // A finished import's files stay; a new import of the same file starts without them.
            try FileManager.default.removeItem(atPath: file.path + ".import.json")
            try FileManager.default.removeItem(atPath: file.path + ".rejects.ndjson")
        }
        #expect(outputs[0].contains("accepted: 1") && outputs[0].contains("fraud: 1"), "\(outputs[0])")
        #expect(outputs[1].contains("duplicates: 1") && outputs[1].contains("fraud: 1"), "\(outputs[1])")
    }

    @Test("CSV and bare lines are read as the API's bodies; a dry run sends nothing and reports bad lines")
    func formats() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let directory = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (first, _) = try system.forgeReceipt()
        let (second, _) = try system.forgeReceipt()
        let csv = directory.appendingPathComponent("history.csv")
        try "receipt,user_identifier,country_code\n\"\(first)\",csv-user,US\n\(second),\"csv, quoted\",\nbroken,\"unclosed\n".write(
            to: csv, atomically: true, encoding: .utf8)
        let base = ["--api", "http://127.0.0.1:\(system.apiPort)", "--token", system.token]
        let dry = try await Self.receiptq(["import", csv.path, "--dry-run"] + base)
        #expect(dry.status == 0, "\(dry.output)")
        #expect(dry.output.contains("valid: 2"))
        #expect(dry.output.contains("invalid: 1"))
        let pg = try system.postgres()
        defer { pg.close() }
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 0)
        try FileManager.default.removeItem(atPath: csv.path + ".rejects.ndjson")

        let sent = try await Self.receiptq(["import", csv.path] + base)
        #expect(sent.status == 0, "\(sent.output)")
        #expect(sent.output.contains("accepted: 2"))
        let users = try await eventually {
            try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id) AND status = 'valid'").rows.first?.int("n") == 2
        }
        #expect(users)
        let stored = try await pg.query(
            "SELECT user_identifier, country_code FROM receipts WHERE app_id = \(system.app.id) ORDER BY user_identifier"
        ).rows
        #expect(stored.map { $0.string("user_identifier") } == ["csv, quoted", "csv-user"])
        #expect(stored.map { $0.string("country_code") } == [nil, "US"])

        // Bare lines, with a token issued for the import by --app (and revoked at its end): the
        // same receipts again are duplicates, not new receipts.
        let bare = directory.appendingPathComponent("history.txt")
        try "\(first)\n\n\(second)\n".write(to: bare, atomically: true, encoding: .utf8)
        var database = ProcessInfo.processInfo.environment
        database.merge([
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase, "LOG_LEVEL": "warning",
        ]) { _, new in new }
        if let password = TestEnvironment.postgresPassword { database["POSTGRES_PASSWORD"] = password }
        let tokensBefore = try await pg.query("SELECT count(*) AS n FROM api_tokens WHERE app_id = \(system.app.id)").rows.first?.int("n")
        let arguments = ["import", bare.path, "--api", "http://127.0.0.1:\(system.apiPort)", "--app", system.app.name]
        let again = try await Self.receiptq(arguments, environment: database)
        #expect(again.status == 0, "\(again.output)")
        #expect(again.output.contains("duplicates: 2"))
        let tokens = try await pg.query(
            "SELECT count(*) AS n, count(*) FILTER (WHERE revoked_at IS NULL) AS live FROM api_tokens WHERE app_id = \(system.app.id)"
        ).rows.first
        #expect(tokens?.int("n") == (tokensBefore ?? 0) + 1, "one token issued for the import")
        #expect(tokens?.int("live") == tokensBefore, "and revoked at its end")
        #expect(try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id)").rows.first?.int("n") == 2)
    }

    @Test("--transactions: a CSV of StoreKit 2 purchases (signed ones and bare ids) goes to the transactions' batch endpoint and ends validated")
    func transactions() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let directory = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var ids: [String] = []
        var rows = ["user_identifier,signed_transaction,transaction_id,environment"]
        for index in 0..<4 {
            let transaction = try system.signedTransaction()
            let id = try #require(transaction.payload["transactionId"]?.stringValue)
            ids.append(id)
            // Half signed, half by id (the environment given), as an old system may have kept either.
            rows.append(index.isMultiple(of: 2) ? "sk2-\(index),\(transaction.jws),," : "sk2-\(index),,\(id),sandbox")
        }
        rows.append("sk2-bad,,not-digits,")
        let file = directory.appendingPathComponent("purchases.csv")
        try (rows.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
        let arguments = ["import", file.path, "--transactions", "--api", "http://127.0.0.1:\(system.apiPort)", "--token", system.token]
        let run = try await Self.receiptq(arguments)
        #expect(run.status == 0, "\(run.output)")
        #expect(run.output.contains("accepted: 4"))
        #expect(run.output.contains("invalid: 1"))
        let pg = try system.postgres()
        defer { pg.close() }
        let validated = try await eventually(timeout: .seconds(30)) {
            try await pg.query(
                "SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id) AND status = 'valid' AND validated_by = 'server_api'"
            ).rows.first?.int("n") == 4
        }
        #expect(validated)
        let stored = try await pg.query("SELECT transaction_id FROM receipts WHERE app_id = \(system.app.id)").rows.compactMap {
            $0.string("transaction_id")
        }
        #expect(Set(stored) == Set(ids))
        let rejects = try String(contentsOfFile: file.path + ".rejects.ndjson", encoding: .utf8)
        #expect(rejects.contains("\"line\":6"))
    }
}
