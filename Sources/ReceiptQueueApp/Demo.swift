import DevTools
import Foundation
import Libpq
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore

/// What `receiptq all --demo` prepared: a registered app, a fresh token and a forged receipt.
public struct DemoSetup: Sendable {
    public var app: AppRecord
    /// The app's API token (only its hash is stored; this is the one chance to see it).
    public var token: String
    /// A JSON request body holding the forged receipt.
    public var requestFile: URL
    /// A JSON request body holding a StoreKit 2 signed transaction (`POST /client/transactions`).
    public var transactionFile: URL
    /// The app's App Store Server Notifications path (`/apple/notifications/demo/{token}`), new each start.
    public var notificationPath: String
    /// The demo receipt's non-consumable, for the refund the demo prints.
    public var refundableTransactionID: String?
}

extension ReceiptQueueApp {
    /// The demo app's bundle id and shared secret (the local mock checks the secret; it is a demo value, not a secret).
    public static let demoBundleID = "com.example.receiptq.demo"
    public static let demoSecret = "demo-shared-secret-0123456789abcdef"

    /// The demo's trust directory: its test CA (`root.pem`; the key files are not certificates and
    /// are skipped by `TrustStore.load`).
    public static func demoTrustDirectory(_ directory: URL) -> URL { directory.appendingPathComponent("forge-ca") }

    /// The demo's mock Apple JWS chain (StoreKit 2 transactions, Server API answers).
    public static func demoJWSDirectory(_ directory: URL) -> URL { directory.appendingPathComponent("jws-ca") }

    /// The secrets key that seals the demo app's In-App Purchase key, made once and kept in
    /// `directory` (a demo value; a deployment sets `RECEIPTQ_SECRETS_KEY`).
    public static func demoSecretsKey(_ directory: URL) throws -> [UInt8] {
        let file = directory.appendingPathComponent("secrets.key")
        if let text = try? String(contentsOf: file, encoding: .utf8),
            let key = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)),
            key.count == 32
        {
            return Array(key)
        }
        let key = SecureRandom.bytes(32)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data(key).base64EncodedString().write(to: file, atomically: true, encoding: .utf8)
        chmod(file.path, 0o600)
        return key
    }

    /// Registers the demo app (once), issues it a new token (revoking older ones), and forges a
    /// receipt signed by the local test CA kept in `directory`.
    ///
    /// The demo app also gets an In-App Purchase key (sealed with `configuration.secretsKey`), which
    /// the in-process `mock` learns, with the demo receipt's purchases and a StoreKit 2 purchase
    /// signed by the mock's chain: one app shows both paths, verifyReceipt and the Server API.
    public static func prepareDemo(_ configuration: AppConfiguration, directory: URL, mock: MockAppStoreState?) throws -> DemoSetup {
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "demo")
        defer { connection.close() }
        let admin = AppAdmin(connection: connection, secrets: try configuration.secretsKey.map { try SecretBox(key: $0) })
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
        try writeDemoHistory(directory.appendingPathComponent("history.ndjson"), bundleID: app.bundleID, authority: authority)

        // StoreKit 2: a key for the app, known to the mock; the receipt's purchases and a new
        // subscription in the mock's ledger; that subscription as the device would send it.
        let jws = try MockAppleJWSAuthority.loadOrCreate(directory: demoJWSDirectory(directory))
        try jws.root.pem.write(
            to: demoTrustDirectory(directory).appendingPathComponent("mock-apple-root-g3.pem"), atomically: true, encoding: .utf8)
        var key = try admin.app(named: "demo")?.serverAPIKey
        if key == nil, configuration.secretsKey != nil {
            let pem = try PrivateKey.generateP256().pemPKCS8()
            try admin.setServerAPIKey(appID: app.id, issuerID: "demo-issuer", keyID: "DEMOKEY001", privateKeyPEM: pem)
            key = ServerAPIKey(issuerID: "demo-issuer", keyID: "DEMOKEY001", privateKeyPEM: pem)
        }
        if let mock, let key {
            mock.serverAPI.addKey(
                issuerID: key.issuerID, keyID: key.keyID, bundleID: app.bundleID, publicKey: try PrivateKey(pem: key.privateKeyPEM).publicKey)
            mock.serverAPI.add(receipt: try ReceiptDecoder.decode(bytes: receipt), environment: .sandbox)
        }
        let signed = try ReceiptForger.signedTransaction(
            bundleID: app.bundleID, productID: "com.example.receiptq.demo.yearly", days: 365, environment: "Sandbox", authority: jws)
        mock?.serverAPI.add(transactions: [signed.payload], environment: .sandbox)
        let transactionFile = directory.appendingPathComponent("demo-transaction.json")
        try JSONEncoder().encode(
            JSONValue.object(["signed_transaction": .string(signed.jws), "user_identifier": .string("demo-user-2")])
        ).write(to: transactionFile)
        let notificationToken = try admin.rotateNotificationToken(appID: app.id)
        return DemoSetup(
            app: app, token: token, requestFile: file, transactionFile: transactionFile,
            notificationPath: "/apple/notifications/\(app.name)/\(notificationToken)",
            refundableTransactionID: try ReceiptDecoder.decode(bytes: receipt).inApp.first { $0.expiresDate == nil }?.transactionID)
    }

    /// A history to try `receiptq import` on: 200 receipts of the demo app, one per line, each its
    /// own user and purchases (forged a second apart, so their transaction ids differ).
    static func writeDemoHistory(_ file: URL, bundleID: String, authority: TestCertificateAuthority) throws {
        var text = ""
        let now = Date()
        for index in 0..<200 {
            let receipt = try ReceiptForger.unified(
                ReceiptForger.demoReceipt(bundleID: bundleID, now: now.addingTimeInterval(-Double(index))), authority: authority)
            var writer = JSONWriter()
            writer.openObject()
            writer.member("receipt", Data(receipt).base64EncodedString())
            writer.member("user_identifier", "history-user-\(index)")
            writer.closeObject()
            text += String(decoding: writer.bytes, as: UTF8.self) + "\n"
        }
        try text.write(to: file, atomically: true, encoding: .utf8)
    }
}
