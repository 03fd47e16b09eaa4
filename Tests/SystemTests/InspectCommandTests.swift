import Foundation
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// `receiptq receipt inspect` on StoreKit 2 JWS and `receiptq forge --signed-transaction`, run as
/// the operator runs them: the built binary, its output and its exit status.
@Suite(
    "The inspect and forge commands on JWS", .blockingWork, .enabled(if: FileManager.default.isExecutableFile(atPath: ReceiptqExecutable.url.path))
)
struct InspectCommandTests {
    func run(_ arguments: [String]) async throws -> (status: Int32, json: JSONValue?, output: String) {
        var environment = ProcessInfo.processInfo.environment
        environment["RECEIPTQ_TRUST_ROOTS_DIR"] = nil
        let errors = FileManager.default.temporaryDirectory.appendingPathComponent("inspect-\(UUID().uuidString).err")
        defer { try? FileManager.default.removeItem(at: errors) }
        // Off the cooperative pool, which the test process's other suites need meanwhile.
        let (status, output) = try await offload { [environment] in
            try runProcess(ReceiptqExecutable.url, arguments, environment: environment, standardError: errors)
        }
        return (status, try? JSONDecoder().decode(JSONValue.self, from: Data(output.utf8)), output)
    }

    @Test(
        "A notification body from Apple: exit 0, its signature valid under Apple Root CA - G3, the nested transaction decoded",
        .enabled(if: TestEnvironment.appStoreTestData != nil))
    func appleNotification() async throws {
        let root = try #require(TestEnvironment.appStoreTestData)
        let file = root.appendingPathComponent("notifications/gopay-v2-consumption_request-production.json").path
        let trusted = try await run(["receipt", "inspect", file, "--trust-roots", root.appendingPathComponent("certs").path])
        #expect(trusted.status == 0)
        #expect(trusted.json?["kind"] == .string("notification"))
        #expect(trusted.json?["signature"]?["valid"] == .bool(true))
        #expect(trusted.json?["payload"]?["data"]?["signedTransactionInfo"]?["payload"]?["transactionId"] == .string("510001261072921"))
        // Judged now, Apple's 2023 leaf has expired: still exit 0 (it decoded), with the reason.
        let now = try await run(["receipt", "inspect", file, "--trust-roots", root.appendingPathComponent("certs").path, "--now"])
        #expect(now.status == 0)
        #expect(now.json?["signature"]?["reason"] == .string("untrusted_chain"))
        let unrooted = try await run(["receipt", "inspect", file])
        #expect(unrooted.status == 0)
        #expect(unrooted.json?["signature"]?["reason"] == .string("no_trust_roots"))
    }

    @Test("forge --signed-transaction writes a JWS that inspect verifies against the forge's chain; garbage exits 2")
    func forgeThenInspect() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("forge-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let ca = directory.appendingPathComponent("ca").path
        let forged = try await run([
            "forge", "--bundle-id", "com.example.forge", "--product", "pro.monthly:30", "--signed-transaction", "--jws-ca-directory", ca,
        ])
        #expect(forged.status == 0)
        let jws = forged.output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(jws.split(separator: ".").count == 3)
        let file = directory.appendingPathComponent("transaction.jws")
        try Data(jws.utf8).write(to: file)
        let inspected = try await run(["receipt", "inspect", file.path, "--trust-roots", ca])
        #expect(inspected.status == 0)
        #expect(inspected.json?["kind"] == .string("transaction"))
        #expect(inspected.json?["signature"]?["valid"] == .bool(true))
        #expect(inspected.json?["payload"]?["productId"] == .string("pro.monthly"))
        #expect(inspected.json?["payload"]?["bundleId"] == .string("com.example.forge"))
        #expect(inspected.json?["payload"]?["type"] == .string("Auto-Renewable Subscription"))

        let garbage = directory.appendingPathComponent("garbage")
        for text in ["eyJ.eyJ.x", "not a receipt at all"] {
            try Data(text.utf8).write(to: garbage)
            let refused = try await run(["receipt", "inspect", garbage.path])
            #expect(refused.status == 2)
            #expect(refused.json == nil)
        }
    }
}
