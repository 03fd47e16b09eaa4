import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptSignature

/// What `receiptq all --demo` prepared: a registered app, a fresh token and a forged receipt.
public struct DemoSetup: Sendable {
    public var app: AppRecord
    /// The app's API token (only its hash is stored; this is the one chance to see it).
    public var token: String
    /// A JSON request body holding the forged receipt.
    public var requestFile: URL
}

extension ReceiptQueueApp {
    /// The demo app's bundle id and shared secret (the local mock checks the secret; it is a demo value, not a secret).
    public static let demoBundleID = "com.example.receiptq.demo"
    public static let demoSecret = "demo-shared-secret-0123456789abcdef"

    /// The demo's trust directory: its test CA (`root.pem`; the key files are not certificates and
    /// are skipped by `TrustStore.load`).
    public static func demoTrustDirectory(_ directory: URL) -> URL { directory.appendingPathComponent("forge-ca") }

    /// Registers the demo app (once), issues it a new token (revoking older ones), and forges a
    /// receipt signed by the local test CA kept in `directory`.
    public static func prepareDemo(_ configuration: AppConfiguration, directory: URL) throws -> DemoSetup {
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "demo")
        defer { connection.close() }
        let admin = AppAdmin(connection: connection)
        let app: AppRecord
        let token: String
        if let existing = try admin.app(named: "demo") {
            app = existing
            token = try admin.rotateToken(appID: existing.id, revokingOthers: true)
        } else {
            (app, token) = try admin.addApp(name: "demo", bundleID: demoBundleID, sharedSecret: demoSecret)
        }
        let authority = try TestCertificateAuthority.loadOrCreate(directory: demoTrustDirectory(directory))
        let receipt = try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: app.bundleID), authority: authority)
        let body: JSONValue = .object([
            "receipt": .string(Data(receipt).base64EncodedString()),
            "user_identifier": .string("demo-user-1"),
            "country_code": .string("US"),
            "metadata": .object(["campaign": .string("demo")]),
        ])
        let file = directory.appendingPathComponent("demo-receipt.json")
        try JSONEncoder().encode(body).write(to: file)
        return DemoSetup(app: app, token: token, requestFile: file)
    }
}
