import Curl
import Foundation
import Hiredis
import IngestAPI
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// The OpenAPI document is the contract: schemathesis (pinned in `.local/venv`) generates requests
/// from the served document for every operation (60 at issue 44: client, admin with Basic, the
/// softphone with its form and XML answers deserialised by `scripts/openapi/schemathesis_hooks.py`;
/// the run's time grows with them, 216 s on a loaded machine), follows the
/// document's links between operations, and runs every check it has: no 5xx, only documented
/// statuses, content types and headers, answers that match their schemas, schema-valid requests
/// accepted and schema-violating ones refused, 405 with `Allow` for undeclared methods, auth
/// enforced. Zero failures, against a whole running system with real data in it.
///
/// Bounded and reproducible: a fixed seed and `--max-examples`, one worker (hypothesis's source
/// inspection is not thread-safe on CPython 3.11), and a hard timeout. Settings that are not
/// credentials live in `scripts/openapi/schemathesis.toml`, with the reasons for each.
@Suite(
    "OpenAPI contract: schemathesis against a running system, zero failures", .blockingWork,
    .enabled(if: TestEnvironment.integrationEnabled && (OpenAPIChecker.python != nil || TestEnvironment.integrationRequired)),
    .serialized)
struct OpenAPIContractTests {
    static let seed = "160422"
    static let maxExamples = "50"

    @Test("schemathesis --checks all over every operation, stateful links included: 0 failures")
    func schemathesisFindsNothing() async throws {
        let python = try #require(OpenAPIChecker.python, "no .local/venv: run scripts/setup-python (scripts/test does)")
        let schemathesis = python.deletingLastPathComponent().appendingPathComponent("schemathesis")
        try #require(FileManager.default.isExecutableFile(atPath: schemathesis.path), "schemathesis is not in .local/venv: run scripts/setup-python")

        // schemathesis sends wrong credentials on purpose, thousands of times from one address: the
        // throttle (DoorThrottleTests) would answer 429 to everything after the first few.
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "3000", "AUTH_THROTTLE_FREE_FAILURES": "1000000"])
        defer { Task { await system.stop() } }
        let softphonePassword = "contract-\(UUID().uuidString.prefix(8))"
        let softphoneUser = "contract-\(UUID().uuidString.prefix(8).lowercased())"
        try await seed(system, softphoneUser: softphoneUser, softphonePassword: softphonePassword)

        let workspace = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-contract-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: workspace, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: workspace) }
        let scripts = OpenAPIChecker.packageRoot.appendingPathComponent("scripts/openapi")
        let environment = [
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workspace.path, "LANG": "C.UTF-8",
            "PYTHONPATH": scripts.path, "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
            "RQ_TOKEN": system.token, "RQ_ADMIN_USER": "admin", "RQ_ADMIN_PASSWORD": "receiptq-dev",
            "RQ_SOFTPHONE_USER": softphoneUser, "RQ_SOFTPHONE_PASSWORD": softphonePassword,
        ]
        let arguments = [
            // Alone ~80 s; in a full `scripts/test` beside every other suite on two cores, over 300.
            "600", schemathesis.path, "--no-color", "--config-file", scripts.appendingPathComponent("schemathesis.toml").path,
            "run", "http://127.0.0.1:\(system.apiPort)/openapi.yaml", "--checks", "all", "--max-examples", Self.maxExamples,
            "--seed", Self.seed, "--workers", "1", "--request-timeout", "30",
        ]
        // Off the cooperative pool (and libdispatch's global queues, as narrow): every other test
        // of the run needs it for the minutes schemathesis runs.
        let (status, output) = try await offload { [arguments, environment, workspace] in
            try runProcess(URL(fileURLWithPath: "/usr/bin/timeout"), arguments, environment: environment, directory: workspace)
        }
        // The whole report stays in .local/ for a failed CI run; the message carries the findings.
        let report = OpenAPIChecker.packageRoot.appendingPathComponent(".local/schemathesis.log")
        try? Data(output.utf8).write(to: report)
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        let findings = lines.filter { $0.hasPrefix("____") || $0.hasPrefix("- ST") || $0.contains("curl -X") }.prefix(40)
        let summary = (findings + ["…"] + lines.suffix(25)).joined(separator: "\n")
        #expect(status == 0, "schemathesis exited \(status) (124: timed out); whole report in \(report.path):\n\(summary)")
        #expect(output.contains("passed"), "no test case ran:\n\(summary)")
        #expect(!output.contains("Errored:"), "an operation could not be tested:\n\(summary)")
    }

    /// Real data for the links to follow: a validated subscription of the document's example user
    /// (`user-42`), a dead letter for the admin API, and softphone credentials.
    func seed(_ system: TestSystem, softphoneUser: String, softphonePassword: String) async throws {
        let connection = try system.postgres()
        defer { connection.close() }
        try SoftphoneAdmin(connection: connection).setCredentials(appID: system.app.id, username: softphoneUser, password: softphonePassword)

        // The demo receipt holds a monthly subscription and a non-consumable.
        let (status, resource) = try await system.post(#"{"receipt":"\#(try system.forgeReceipt().0)","user_identifier":"user-42"}"#)
        #expect(status == 200 || status == 206, "the seeded receipt is taken")
        if status == 206, let id = resource?["id"]?.stringValue {
            // Past the sync wait on a loaded machine (CI ran 500 tests beside this one): wait for it.
            let validated = try await eventually(timeout: .seconds(60)) {
                try await system.get(id).1?["validation_status"]?.stringValue == "valid"
            }
            #expect(validated, "the seeded receipt validates")
        }
        #expect(try await system.get(path: "/client/subscriptions?user_identifier=user-42").1?["subscriptions"]?.arrayValue?.isEmpty == false)

        // A shared secret Apple no longer accepts: the next receipt becomes a dead letter.
        system.mock.state.setSharedSecret("rotated-\(UUID().uuidString)", for: system.app.bundleID)
        let (secondStatus, _) = try await system.post(#"{"receipt":"\#(try system.forgeReceipt().0)","user_identifier":"user-43"}"#)
        #expect(secondStatus / 100 == 2)
        let redis = try system.redis()
        defer { redis.close() }
        #expect(try await eventually { try redis.send(["ZCARD", system.configuration.keys.dead]).int == 1 })
    }
}
