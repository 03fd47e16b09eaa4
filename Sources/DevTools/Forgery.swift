import Curl
import Foundation
import OpenSSL
import ReceiptCore

/// What `receiptq forge` writes, from its options as given: a receipt in Apple's formats signed by
/// a local test CA, or a StoreKit 2 signed transaction signed by the mock's Apple-shaped chain.
/// Never Apple's.
public enum Forgery {
    /// An option `receiptq forge` cannot use; `message` names the option.
    public struct OptionError: Error, CustomStringConvertible {
        /// What is wrong, naming the option (never a key or a receipt).
        public var message: String
        public var description: String { message }
    }

    /// A receipt of `bundleID`: the demo's purchases, or one per product spec.
    /// - Parameters:
    ///   - environment: `Production`, `ProductionSandbox` or `Xcode`.
    ///   - products: `PRODUCT_ID`, or `PRODUCT_ID:DAYS` for a subscription expiring DAYS from now.
    ///   - mock: mock App Store directives carried in the receipt (`status=21005,delay_ms=50`).
    ///   - caDirectory: the test CA's directory (created on first use).
    ///   - digest: `sha1` or `sha256`.
    ///   - style: `unified` (iOS 7+) or `transaction` (iOS 6, first purchase only).
    /// - Returns: the receipt's bytes.
    /// - Throws: ``OptionError`` for an option it cannot use.
    public static func receipt(
        bundleID: String, environment: String, products: [String], mock: String?, caDirectory: String, digest: String, style: String
    ) throws -> [UInt8] {
        guard let digest = PKCS7.DigestAlgorithm(rawValue: digest) else { throw OptionError(message: "--digest must be sha1 or sha256") }
        let now = Date()
        let base = UInt64(now.timeIntervalSince1970 * 1000)
        var purchases: [InAppPurchase] = []
        for (index, spec) in products.enumerated() {
            let parts = spec.split(separator: ":", maxSplits: 1).map(String.init)
            let id = "\(base)\(String(format: "%02d", index))"
            var purchase = InAppPurchase(
                quantity: 1, productID: parts[0], transactionID: id, originalTransactionID: id,
                purchaseDate: now.addingTimeInterval(-60), originalPurchaseDate: now.addingTimeInterval(-60))
            if parts.count == 2 {
                guard let days = Double(parts[1]) else { throw OptionError(message: "--product \(spec): DAYS must be a number") }
                purchase.expiresDate = now.addingTimeInterval(days * 86_400)
                purchase.webOrderLineItemID = id
            }
            purchases.append(purchase)
        }
        var receipt = ReceiptForger.demoReceipt(bundleID: bundleID, now: now)
        receipt.environment = ReceiptEnvironment(rawValue: environment)
        if !products.isEmpty { receipt.inApp = purchases }
        if let mock { receipt.opaqueValue = Array("mock:\(mock)".utf8) }
        let authority = try TestCertificateAuthority.loadOrCreate(directory: URL(fileURLWithPath: caDirectory))
        switch style {
        case "unified": return try ReceiptForger.unified(receipt, authority: authority, digest: digest)
        case "transaction": return try ReceiptForger.transaction(receipt, authority: authority)
        default: throw OptionError(message: "--style must be unified or transaction")
        }
    }

    /// A StoreKit 2 signed transaction: a new purchase of the first product spec's product (a
    /// subscription when it has DAYS; default `<bundleID>.product`).
    /// - Parameters:
    ///   - environment: `Sandbox` (or `ProductionSandbox`) or `Production`, any case.
    ///   - jwsCaDirectory: the mock Apple JWS chain's directory (created on first use).
    /// - Returns: the compact JWS, its payload and the environment's name as Apple spells it.
    /// - Throws: ``OptionError`` for an option it cannot use.
    public static func signedTransaction(
        bundleID: String, products: [String], environment: String, jwsCaDirectory: String
    ) throws -> (jws: String, payload: JSONValue, environment: String) {
        let spec = (products.first ?? "\(bundleID).product").split(separator: ":", maxSplits: 1).map(String.init)
        let days =
            try spec.count == 2 ? Double(spec[1]) ?? { throw OptionError(message: "--product \(spec[0]): DAYS must be a number") }() : nil
        let environmentName: String
        switch environment.lowercased() {
        case "sandbox", "productionsandbox": environmentName = "Sandbox"
        case "production": environmentName = "Production"
        default: throw OptionError(message: "--environment must be Sandbox or Production with --signed-transaction")
        }
        let authority = try MockAppleJWSAuthority.loadOrCreate(directory: URL(fileURLWithPath: jwsCaDirectory))
        let (jws, payload) = try ReceiptForger.signedTransaction(
            bundleID: bundleID, productID: spec[0], days: days, environment: environmentName, authority: authority)
        return (jws, payload, environmentName)
    }

    /// Adds a signed transaction's payload to the Server API ledger of the mock App Store at
    /// `mock` (e.g. `http://127.0.0.1:9090`).
    /// - Throws: ``OptionError`` when the mock does not take it.
    public static func register(_ payload: JSONValue, environment: String, at mock: String) async throws {
        let body = try JSONEncoder().encode(JSONValue.object(["environment": .string(environment), "transactions": .array([payload])]))
        let client = try Curl.HTTPClient(options: CurlOptions(), lanes: 1)
        let status = try await client.send(
            Curl.HTTPRequest(
                method: "POST", url: "\(mock)/mock/server-api/transactions", headers: [(name: "Content-Type", value: "application/json")],
                body: Array(body))
        ).status
        guard status == 201 else { throw OptionError(message: "the mock at \(mock) did not take the transaction (HTTP \(status))") }
    }
}
