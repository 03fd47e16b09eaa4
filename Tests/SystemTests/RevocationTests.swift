import DevTools
import Foundation
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Revocation through the doors (issue 42 item 7): a chain whose leaf a local `openssl ocsp`
/// responder says is revoked, trusted by the system's roots: its signed transaction is refused as
/// fraud (`certificate_revoked`, 402), like its app transaction.
@Suite("OCSP revocation at the doors, end to end", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RevocationTests {
    @Test("A transaction and an app transaction signed by a revoked leaf: 402 with fraud_reason certificate_revoked")
    func revokedLeafRefused() async throws {
        let port = try freeLoopbackPort()
        let revoked = try MockAppleJWSAuthority.generate(ocspURL: "http://127.0.0.1:\(port)")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("revocation-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try revoked.intermediate.pem.write(to: directory.appendingPathComponent("ca.pem"), atomically: true, encoding: .utf8)
        try revoked.intermediateKey.pemPKCS8().write(to: directory.appendingPathComponent("ca.key"), atomically: true, encoding: .utf8)
        try "R\t351231235959Z\t240101000000Z\t03\tunknown\t/CN=leaf\n".write(
            to: directory.appendingPathComponent("index.txt"), atomically: true, encoding: .utf8)
        let responder = try ChildProcess(
            ["openssl", "ocsp", "-index", "index.txt", "-port", String(port), "-CA", "ca.pem", "-rsigner", "ca.pem", "-rkey", "ca.key"],
            directory: directory.path)
        defer {
            responder.terminate()
            responder.waitUntilExit()
        }
        // The system trusts the revoked chain's root next to the usual test roots.
        let trust = directory.appendingPathComponent("trust")
        try FileManager.default.copyItem(at: try TestSystem.trustDirectory.get(), to: trust)
        try revoked.root.pem.write(to: trust.appendingPathComponent("revoked-root.pem"), atomically: true, encoding: .utf8)
        let system = try await TestSystem.start(environment: ["RECEIPTQ_TRUST_ROOTS_DIR": trust.path, "RECEIPTQ_OCSP": "soft"])
        defer { Task { await system.stop() } }

        let (jws, _) = try ReceiptForger.signedTransaction(bundleID: system.app.bundleID, productID: "com.example.lifetime", authority: revoked)
        let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string("revoked-user")]).encodedText
        // The responder may still be starting: a query that finds no answer soft-fails (and is
        // remembered for a minute), so wait until it listens before the first JWS reaches the door.
        #expect(
            try await eventually {
                (try? ChildProcess.run([
                    "openssl", "ocsp", "-url", "http://127.0.0.1:\(port)", "-issuer",
                    directory.appendingPathComponent("ca.pem").path, "-serial", "3", "-CAfile", directory.appendingPathComponent("ca.pem").path,
                ]).status) == 0
            })
        let (status, answer) = try await system.post(body, path: "/client/transactions")
        #expect(status == 402, "\(String(describing: answer))")
        #expect(answer?["fraud_reason"]?.stringValue == "certificate_revoked")

        let app = try revoked.sign(
            MockServerAPIState.appTransaction(
                bundleID: system.app.bundleID, appAppleID: nil, environment: .sandbox, appTransactionID: "7000000099",
                originalApplicationVersion: "1.0", originalPurchaseDate: Date(timeIntervalSince1970: 1_600_000_000)))
        let refused = try await system.post(
            JSONValue.object(["signed_app_transaction": .string(app), "user_identifier": .string("revoked-user")]).encodedText,
            path: "/client/app-transactions")
        #expect(refused.0 == 402)
        #expect(refused.1?["fraud_reason"]?.stringValue == "certificate_revoked")
        // The usual chain (no responder named) is still taken.
        let (good, _) = try system.signedTransaction(product: "com.example.lifetime", days: nil)
        let accepted = try await system.post(
            JSONValue.object(["signed_transaction": .string(good), "user_identifier": .string("good-user")]).encodedText,
            path: "/client/transactions")
        #expect(accepted.0 == 200)
    }
}
