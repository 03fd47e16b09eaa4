import Conformance
import Foundation
import Libpq
import Logging
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// `receiptq conformance` run as a developer runs it: the built binary against the tests' Redis
/// and Postgres, its table, its exit status, and its refusal of bad arguments.
@Suite(
    "The conformance command", .blockingWork, .enabled(if: FileManager.default.isExecutableFile(atPath: ReceiptqExecutable.url.path)),
    .serialized)
struct ConformanceCommandTests {
    /// The deployment's roles say only what is critical: a run's table is what the tests read.
    static let quiet: Logger = {
        var logger = Logger(label: "conformance")
        logger.logLevel = .critical
        return logger
    }()

    /// Runs `receiptq conformance` with `arguments` on the tests' servers; stdout alone, stderr kept apart.
    func run(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
        let environment = ProcessInfo.processInfo.environment.merging(TestSystem.serverEnvironment) { _, tests in tests }
        let errors = FileManager.default.temporaryDirectory.appendingPathComponent("conformance-\(UUID().uuidString).err")
        defer { try? FileManager.default.removeItem(at: errors) }
        // Off the cooperative pool, which the test process's other suites need meanwhile.
        let (status, output) = try await offload { [environment] in
            try runProcess(ReceiptqExecutable.url, ["conformance"] + arguments, environment: environment, standardError: errors)
        }
        return (status, output, (try? String(contentsOf: errors, encoding: .utf8)) ?? "")
    }

    @Test(
        "A tiny run (6 customers, 20 days, no faults): one table row per scenario dealt and a total, the seed and span, exit 0, its database gone",
        .enabled(if: TestEnvironment.integrationEnabled))
    func tinyRun() async throws {
        let json = FileManager.default.temporaryDirectory.appendingPathComponent("conformance-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: json) }
        let result = try await run(["--customers", "6", "--days", "20", "--faults", "none", "--seed", "45", "--json", json.path])
        #expect(result.status == 0, "\(result.output)\n\(result.errors)")
        let lines = result.output.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let header = try #require(lines.first)
        #expect(
            header.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
                == "scenario customers answers wrong late events missing duplicated out of order unexpected")
        // Scenarios are dealt round-robin: six customers, the first six scenarios, one each.
        let rows = lines.dropFirst().prefix { !$0.isEmpty }.map { $0.split(separator: " ").map(String.init) }
        #expect(rows.map { $0[0] } == Scenario.allCases.prefix(6).map(\.rawValue) + ["total"])
        #expect(rows.allSatisfy { $0.count == 10 && $0.dropFirst().allSatisfy { Int($0) != nil } }, "\(result.output)")
        let total = try #require(rows.last)
        #expect(total[1] == "6")
        #expect(Int(total[2]) ?? 0 >= 6, "every customer asked for at least once")
        #expect(total[3] == "0" && total[6] == "0" && total[7] == "0", "no wrong answer, no event missing or duplicated")
        #expect(result.output.contains("seed 45, 6 customers, 20 simulated days"))
        #expect(result.output.contains("wall time "))
        #expect(result.output.contains("\nconformant: "))

        // The JSON the bench row reads says the same.
        let written = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: json))
        #expect(written["total"]?["customers"] == .number(6))
        #expect(written["total"]?["answers_checked"] == .number(Double(total[2]) ?? -1))
        #expect(written["conformant"] == .bool(true))
        #expect(written["seed"] == .string("45"))

        // It removed the database it created.
        let name = try #require(result.output.firstMatch(of: #/database (receiptq_conformance_[0-9a-f]+), dropped/#)?.1).description
        let connection = try TestSystem.migratedDatabase()
        let postgres = try PostgresConnection(configuration: connection.postgres)
        defer { postgres.close() }
        #expect(try await postgres.query("SELECT 1 FROM pg_database WHERE datname = \(name)").rows.isEmpty, "\(name) dropped")
    }

    @Test(
        "--faults killed: the command starts its own executable as the worker process (`conformance-worker`), kills it and says so",
        .enabled(if: TestEnvironment.integrationEnabled))
    func killedWorker() async throws {
        let result = try await run(["--customers", "12", "--days", "30", "--faults", "killed", "--seed", "4549"])
        #expect(result.status == 0, "\(result.output)\n\(result.errors)")
        #expect(result.output.contains("faults killed"))
        #expect(result.output.contains("\nworker process killed "), "\(result.output)")
    }

    @Test("Bad arguments are refused with a message naming them and exit 64, before any server is touched")
    func badArguments() async throws {
        let faults = try await run(["--faults", "sometimes"])
        #expect(faults.status == 64)
        #expect(faults.errors.contains("--faults"), "\(faults.errors)")
        // Six presets: the parser lists them one a line.
        #expect(Faults.Preset.allCases.allSatisfy { faults.errors.contains("  - \($0.rawValue)\n") }, "\(faults.errors)")
        #expect(!faults.errors.contains("<subcommand>"), "the hidden worker command is no subcommand of conformance")
        #expect(!faults.errors.contains("Fatal error"))
        let customers = try await run(["--customers", "0"])
        #expect(customers.status == 64)
        #expect(customers.errors.contains("--customers must be at least 1, not 0"), "\(customers.errors)")
        let days = try await run(["--days", "0"])
        #expect(days.status == 64)
        #expect(days.errors.contains("--days must be at least 1, not 0"), "\(days.errors)")
    }

    @Test("--help says what makes the exit status non-zero")
    func help() async throws {
        let help = try await run(["--help"])
        #expect(help.status == 0)
        #expect(help.output.contains("Exit status"))
        #expect(help.output.contains("missing or duplicated"))
    }
}
