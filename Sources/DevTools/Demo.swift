import Foundation
import Hummingbird
import Logging
import OpenSSL
import ReceiptCore

/// What `receiptq all --demo` prepared: a registered app, a fresh token and forged requests.
public struct DemoSetup: Sendable {
    /// The demo app, registered once and reused by later runs.
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

    /// A setup of these parts.
    public init(
        app: AppRecord, token: String, requestFile: URL, transactionFile: URL, notificationPath: String, refundableTransactionID: String?
    ) {
        self.app = app
        self.token = token
        self.requestFile = requestFile
        self.transactionFile = transactionFile
        self.notificationPath = notificationPath
        self.refundableTransactionID = refundableTransactionID
    }
}

/// What the demo forged into its directory: the requests to try, and what the mock App Store must
/// know to answer them.
public struct DemoFiles: Sendable {
    /// The forged receipt (its purchases go into the mock's Server API ledger).
    public var receipt: AppReceipt
    /// A JSON request body holding the forged receipt.
    public var requestFile: URL
    /// The StoreKit 2 purchase's payload, for the mock's ledger.
    public var transaction: JSONValue
    /// A JSON request body holding that purchase's signed transaction.
    public var transactionFile: URL
}

/// The data of the demo `scripts/run` starts (`receiptq all --demo`): its app's constants, the
/// receipts and transactions it forges, and the instructions it prints.
public enum Demo {
    /// The demo app's bundle id.
    public static let bundleID = "com.example.receiptq.demo"
    /// The demo app's shared secret (the local mock checks it; a demo value, not a secret).
    public static let sharedSecret = "demo-shared-secret-0123456789abcdef"

    /// The demo's trust directory: its test CA (`root.pem`; the key files are not certificates and
    /// are skipped by `TrustStore.load`).
    public static func trustDirectory(_ directory: URL) -> URL { directory.appendingPathComponent("forge-ca") }

    /// The demo's mock Apple JWS chain (StoreKit 2 transactions, Server API answers).
    public static func jwsDirectory(_ directory: URL) -> URL { directory.appendingPathComponent("jws-ca") }

    /// The secrets key that seals the demo app's In-App Purchase key, made once and kept in
    /// `directory` (a demo value; a deployment sets `RECEIPTQ_SECRETS_KEY`).
    public static func secretsKey(_ directory: URL) throws -> [UInt8] {
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

    /// The demo app's backend: a webhook receiver on `port` (`127.0.0.1`) that checks each
    /// delivery's signature and logs it.
    /// - Parameter register: registers the receiver's URL as the demo app's endpoint and returns
    ///   the endpoint's signing secret.
    public static func backend(port: Int, logger: Logger, register: (String) throws -> String) throws -> some ApplicationProtocol {
        let receiver = WebhookReceiver(secret: "") { delivery in
            logger.notice(
                "Demo backend received \(delivery.type)",
                metadata: [
                    "event.id": "\(delivery.eventID)", "signature.valid": "\(delivery.signatureValid)",
                    "user": "\(delivery.event?["user_identifier"]?.stringValue ?? "-")",
                ])
        }
        receiver.setSecret(try register("http://127.0.0.1:\(port)\(receiver.path)"))
        return receiver.application(host: "127.0.0.1", port: port, logger: logger)
    }

    /// A new In-App Purchase key for the demo app, as App Store Connect would issue one.
    public static func serverAPIKey() throws -> ServerAPIKey {
        ServerAPIKey(issuerID: "demo-issuer", keyID: "DEMOKEY001", privateKeyPEM: try PrivateKey.generateP256().pemPKCS8())
    }

    /// Forges the demo's requests into `directory`: a receipt signed by the local test CA (with a
    /// history of 200 more to try `receiptq import` on) and a StoreKit 2 purchase signed by the mock's
    /// Apple-shaped chain, whose root the trust directory then holds too.
    public static func forge(bundleID: String, directory: URL) throws -> DemoFiles {
        let authority = try TestCertificateAuthority.loadOrCreate(directory: trustDirectory(directory))
        let receipt = try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: bundleID), authority: authority)
        let body: JSONValue = .object([
            "receipt": .string(Data(receipt).base64EncodedString()),
            "user_identifier": .string("demo-user-1"),
            "country_code": .string("US"),
            "metadata": .object(["campaign": .string("demo")]),
        ])
        let file = directory.appendingPathComponent("demo-receipt.json")
        try JSONEncoder().encode(body).write(to: file)
        try writeHistory(directory.appendingPathComponent("history.ndjson"), bundleID: bundleID, authority: authority)

        let jws = try MockAppleJWSAuthority.loadOrCreate(directory: jwsDirectory(directory))
        try jws.root.pem.write(
            to: trustDirectory(directory).appendingPathComponent("mock-apple-root-g3.pem"), atomically: true, encoding: .utf8)
        let signed = try ReceiptForger.signedTransaction(
            bundleID: bundleID, productID: "com.example.receiptq.demo.yearly", days: 365, environment: "Sandbox", authority: jws)
        let transactionFile = directory.appendingPathComponent("demo-transaction.json")
        try JSONEncoder().encode(
            JSONValue.object(["signed_transaction": .string(signed.jws), "user_identifier": .string("demo-user-2")])
        ).write(to: transactionFile)
        return DemoFiles(
            receipt: try ReceiptDecoder.decode(bytes: receipt), requestFile: file, transaction: signed.payload, transactionFile: transactionFile)
    }

    /// A history to try `receiptq import` on: 200 receipts of the demo app, one per line, each its
    /// own user and purchases (forged a second apart, so their transaction ids differ).
    static func writeHistory(_ file: URL, bundleID: String, authority: TestCertificateAuthority) throws {
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
