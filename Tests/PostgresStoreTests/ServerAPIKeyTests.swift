import Foundation
import Libpq
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// `receiptq apps server-api-key` and `apps validation` against real Postgres: the In-App Purchase
/// key is stored sealed, opens only with the deployment's secrets key, and never shows again.
@Suite("In-App Purchase keys: stored encrypted, shown never", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct ServerAPIKeyTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    let secretsKey = SecureRandom.bytes(32)

    init() throws {
        configuration = try TestSystem.migratedDatabase()
        connection = try PostgresConnection(configuration: configuration.postgres)
    }

    func receiptq(_ arguments: [String], secretsKey: [UInt8]?) async throws -> (status: Int32, output: String) {
        var environment = ProcessInfo.processInfo.environment
        for (key, value) in [
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase,
        ] {
            environment[key] = value
        }
        environment["RECEIPTQ_SECRETS_KEY"] = secretsKey.map { Data($0).base64EncodedString() }
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("server-api-key-\(UUID().uuidString).stderr")
        defer { try? FileManager.default.removeItem(at: log) }
        // Off the cooperative pool: the test process has two of its threads, and other suites' tests need them meanwhile.
        let result = try await offload { [environment] in
            try runProcess(ReceiptqExecutable.url, arguments, environment: environment, standardError: log)
        }
        let stderr = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        return (result.status, result.output + stderr)
    }

    @Test("The key is sealed in Postgres, opens for the worker's store with the same secrets key only, and appears in no output")
    func sealedAndNeverShown() async throws {
        let name = "iap-key-\(UUID().uuidString.prefix(8).lowercased())"
        let (app, _) = try AppAdmin(connection: connection).addApp(name: name, bundleID: "com.example.iapkey", sharedSecret: nil)
        let key = try PrivateKey.generateP256()
        let pem = try key.pemPKCS8()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey_\(UUID().uuidString.prefix(6)).p8")
        try pem.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let arguments = [
            "apps", "server-api-key", "--name", name, "--issuer-id", "57246542-96fe-1a63-e053-0824d011072a", "--key-id", "2X9R4HXF34", "--key-file",
            file.path,
        ]

        let refused = try await receiptq(arguments, secretsKey: nil)
        #expect(refused.status != 0)
        #expect(refused.output.contains("RECEIPTQ_SECRETS_KEY"))

        let stored = try await receiptq(arguments, secretsKey: secretsKey)
        #expect(stored.status == 0, "\(stored.output)")
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        #expect(!stored.output.contains(body.prefix(24)))

        let row = try #require(try await connection.query("SELECT sealed_key, key_id FROM app_server_api_keys WHERE app_id = \(app.id)").rows.first)
        let sealed = try #require(row.bytes("sealed_key"))
        #expect(row.string("key_id") == "2X9R4HXF34")
        #expect(!String(decoding: sealed, as: UTF8.self).contains("PRIVATE KEY"))

        let opened = try #require(try PostgresReceiptStore(connection: connection, secrets: SecretBox(key: secretsKey)).app(id: app.id))
        #expect(opened.serverAPIKey?.keyID == "2X9R4HXF34")
        #expect(try PrivateKey(pem: try #require(opened.serverAPIKey?.privateKeyPEM)).publicKey.spki == key.publicKey.spki)
        #expect(!"\(opened)".contains(body.prefix(24)))
        #expect("\(opened.serverAPIKey!)".contains("<redacted>"))

        let wrongKey = try #require(try PostgresReceiptStore(connection: connection, secrets: SecretBox(key: SecureRandom.bytes(32))).app(id: app.id))
        #expect(wrongKey.serverAPIKey == nil)
        #expect(wrongKey.serverAPIKeyID == "2X9R4HXF34")

        let listed = try await receiptq(["apps", "list"], secretsKey: secretsKey)
        #expect(listed.output.contains("server-api-key: 2X9R4HXF34"))
        #expect(!listed.output.contains(body.prefix(24)))

        let removed = try await receiptq(["apps", "server-api-key", "--name", name, "--remove"], secretsKey: secretsKey)
        #expect(removed.output.contains("removed"))
        #expect(try await connection.query("SELECT 1 FROM app_server_api_keys WHERE app_id = \(app.id)").rows.isEmpty)
    }

    @Test("A key file that is not a P-256 .p8 key, or a malformed key id, is refused with the reason")
    func refusals() async throws {
        let name = "iap-bad-\(UUID().uuidString.prefix(8).lowercased())"
        _ = try AppAdmin(connection: connection).addApp(name: name, bundleID: "com.example.iapbad", sharedSecret: nil)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rsa-\(UUID().uuidString.prefix(6)).p8")
        try PrivateKey.generateRSA(bits: 2048).pemPKCS8().write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let rsa = try await receiptq(
            ["apps", "server-api-key", "--name", name, "--issuer-id", "i", "--key-id", "k", "--key-file", file.path], secretsKey: secretsKey)
        #expect(rsa.status != 0)
        #expect(rsa.output.contains("P-256"))
        try PrivateKey.generateP256().pemPKCS8().write(to: file, atomically: true, encoding: .utf8)
        let badID = try await receiptq(
            ["apps", "server-api-key", "--name", name, "--issuer-id", "i", "--key-id", "has space", "--key-file", file.path], secretsKey: secretsKey)
        #expect(badID.status != 0)
        #expect(badID.output.contains("printable ASCII"))
    }

    @Test("apps validation sets the backend, sandbox policy, device check and app id; a manual backend undoes an automatic switch")
    func validationSettings() async throws {
        let name = "iap-validation-\(UUID().uuidString.prefix(8).lowercased())"
        let (app, _) = try AppAdmin(connection: connection).addApp(name: name, bundleID: "com.example.iapvalidation", sharedSecret: nil)
        let fresh = try #require(try AppAdmin(connection: connection).app(named: name))
        #expect(fresh.backend == .auto && fresh.sandboxPolicy == .accept && fresh.checksDevice)
        _ = try await connection.query("UPDATE apps SET switched_to_server_api_at = now() WHERE id = \(app.id)")
        let set = try await receiptq(
            [
                "apps", "validation", "--name", name, "--backend", "server_api", "--sandbox-policy", "reject", "--device-check", "off",
                "--app-apple-id", "1601830814",
            ],
            secretsKey: nil)
        #expect(set.status == 0, "\(set.output)")
        let updated = try #require(try AppAdmin(connection: connection).app(named: name))
        #expect(updated.backend == .serverAPI)
        #expect(updated.switchedToServerAPIAt == nil)
        #expect(updated.sandboxPolicy == .reject)
        #expect(!updated.checksDevice)
        #expect(updated.appAppleID == 1_601_830_814)
        let invalid = try await receiptq(["apps", "validation", "--name", name, "--backend", "soap"], secretsKey: nil)
        #expect(invalid.status != 0)
        #expect(invalid.output.contains("verify_receipt, server_api or auto"))
    }
}
