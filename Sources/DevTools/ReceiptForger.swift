import Foundation
import OpenSSL
import ReceiptCore

/// A certificate authority for forged test receipts: a root and a receipt-signing leaf, shaped
/// like Apple's (root → signer), but never trusted in production.
public struct TestCertificateAuthority: Sendable {
    public var root: Certificate
    public var rootKey: PrivateKey
    public var signer: Certificate
    public var signerKey: PrivateKey

    /// An authority from existing certificates and keys (for chains other than root → signer).
    public init(root: Certificate, rootKey: PrivateKey, signer: Certificate, signerKey: PrivateKey) {
        self.root = root
        self.rootKey = rootKey
        self.signer = signer
        self.signerKey = signerKey
    }

    /// Generates a new authority valid from a year ago for ten years (so receipts dated in the past verify).
    public static func generate(name: String = "receiptq Test Root CA (NOT APPLE)") throws -> TestCertificateAuthority {
        let now = Date()
        let from = now.addingTimeInterval(-365 * 86_400)
        let to = now.addingTimeInterval(10 * 365 * 86_400)
        let rootKey = try PrivateKey.generateRSA(bits: 2048)
        let root = try CertificateFactory.selfSigned(
            CertificateRequestSpec(
                commonName: name, organization: "receiptq tests", isCA: true, validFrom: from, validTo: to, serial: 1),
            key: rootKey)
        let signerKey = try PrivateKey.generateRSA(bits: 2048)
        let signer = try CertificateFactory.issue(
            CertificateRequestSpec(
                commonName: "receiptq Test Receipt Signing", organization: "receiptq tests", isCA: false, validFrom: from,
                validTo: to, serial: 2),
            publicKeyOf: signerKey, issuer: root, issuerKey: rootKey)
        return TestCertificateAuthority(root: root, rootKey: rootKey, signer: signer, signerKey: signerKey)
    }

    /// Loads the authority kept in `directory` (`root.pem`, `root.key`, `signer.pem`, `signer.key`), or
    /// generates and saves one, so forged receipts stay verifiable across runs.
    public static func loadOrCreate(directory: URL) throws -> TestCertificateAuthority {
        let files = ["root.pem", "root.key", "signer.pem", "signer.key"].map { directory.appendingPathComponent($0) }
        if files.allSatisfy({ FileManager.default.fileExists(atPath: $0.path) }) {
            let text = try files.map { try String(contentsOf: $0, encoding: .utf8) }
            return TestCertificateAuthority(
                root: try Certificate(pem: text[0]), rootKey: try PrivateKey(pem: text[1]),
                signer: try Certificate(pem: text[2]), signerKey: try PrivateKey(pem: text[3]))
        }
        let authority = try generate()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let contents = [authority.root.pem, try authority.rootKey.pemPKCS8(), authority.signer.pem, try authority.signerKey.pemPKCS8()]
        for (file, text) in zip(files, contents) {
            try text.write(to: file, atomically: true, encoding: .utf8)
        }
        // The keys are test keys, but still nobody else's business.
        for file in [files[1], files[3]] { chmod(file.path, 0o600) }
        return authority
    }
}

/// Writes receipts in Apple's format, signed by a ``TestCertificateAuthority``: for tests, the demo
/// and the benchmark.
public enum ReceiptForger {
    /// A unified (iOS 7+) receipt: the DER payload in a PKCS#7 SignedData, signed like Apple's.
    /// - Returns: the receipt bytes (base64-encode them to send).
    public static func unified(
        _ receipt: AppReceipt, authority: TestCertificateAuthority, digest: PKCS7.DigestAlgorithm = .sha256
    ) throws -> [UInt8] {
        try PKCS7.sign(
            content: ReceiptPayloadEncoder.encode(receipt), signer: authority.signer, key: authority.signerKey,
            chain: [authority.root], digest: digest)
    }

    /// An iOS 6 transaction receipt for `receipt`'s first purchase: purchase-info signed with
    /// RSA-SHA1 over version byte ‖ purchase-info, the signer certificate embedded, as Apple did.
    public static func transaction(_ receipt: AppReceipt, authority: TestCertificateAuthority) throws -> [UInt8] {
        guard let purchase = receipt.inApp.first else {
            throw ForgeError(message: "a transaction receipt needs one purchase")
        }
        func ms(_ date: Date?) -> String? { date.map { String(Int64(($0.timeIntervalSince1970 * 1000).rounded())) } }
        var fields: [String: String] = [
            "bid": receipt.bundleID,
            "bvrs": receipt.applicationVersion ?? "1.0",
            "product-id": purchase.productID,
            "transaction-id": purchase.transactionID,
            "original-transaction-id": purchase.originalTransactionID,
            "quantity": String(purchase.quantity),
            "item-id": "1",
            "unique-identifier": "0000forged",
        ]
        fields["purchase-date-ms"] = ms(purchase.purchaseDate)
        fields["purchase-date"] = purchase.purchaseDate.map(AppleDateFormat.format)
        fields["original-purchase-date-ms"] = ms(purchase.originalPurchaseDate)
        fields["original-purchase-date"] = purchase.originalPurchaseDate.map(AppleDateFormat.format)
        fields["expires-date"] = ms(purchase.expiresDate)
        fields["web-order-line-item-id"] = purchase.webOrderLineItemID
        let purchaseInfo = TransactionReceiptCodec.encodePurchaseInfo(fields)
        // Version 3 is the 2048-bit layout (256-byte signature), which our test keys need.
        let version: UInt8 = 3
        let signature = try RSASignature.signSHA1(
            data: TransactionReceiptCodec.signedBytes(version: version, purchaseInfo: purchaseInfo), key: authority.signerKey)
        let blob = TransactionReceiptCodec.signatureBlob(version: version, signature: signature, certificate: authority.signer.der)
        let environment = receipt.environment.isSandbox ? "Sandbox" : "Production"
        return TransactionReceiptCodec.encode(environment: environment, purchaseInfoBytes: purchaseInfo, signatureBlob: blob)
    }

    /// A demo receipt: one non-consumable and one monthly subscription, in the sandbox.
    public static func demoReceipt(bundleID: String, now: Date = Date()) -> AppReceipt {
        // Receipts carry whole seconds; rounding here keeps a forged receipt equal to its decoding.
        let now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        // Unique per receipt, not per second: the ledger keys purchases by transaction id, and two
        // demo receipts forged in the same second must not claim each other's transactions.
        let base = UInt64(now.timeIntervalSince1970) * 1_000_000 + UInt64.random(in: 0..<1_000_000)
        let purchased = now.addingTimeInterval(-3600)
        return AppReceipt(
            style: .unified, bundleID: bundleID, environment: .productionSandbox, applicationVersion: "1.0",
            originalApplicationVersion: "1.0", opaqueValue: SecureRandom.bytes(16), sha1Hash: SecureRandom.bytes(20),
            creationDate: now, originalPurchaseDate: purchased,
            inApp: [
                InAppPurchase(
                    quantity: 1, productID: "\(bundleID).lifetime", transactionID: "\(base)01",
                    originalTransactionID: "\(base)01", purchaseDate: purchased, originalPurchaseDate: purchased),
                InAppPurchase(
                    quantity: 1, productID: "\(bundleID).pro.monthly", transactionID: "\(base)02",
                    originalTransactionID: "\(base)02", purchaseDate: purchased, originalPurchaseDate: purchased,
                    expiresDate: purchased.addingTimeInterval(30 * 86_400), webOrderLineItemID: "\(base)03",
                    isTrialPeriod: true),
            ])
    }
}

/// A receipt could not be forged as asked.
public struct ForgeError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { "ForgeError: \(message)" }
}

extension ReceiptForger {
    /// A StoreKit 2 signed transaction as a device would send it, signed by `authority`: a new
    /// purchase of `productID` (an auto-renewable subscription expiring in `days` days when given)
    /// with fresh ids, priced `price` (milli-units of `currency`, as Apple signs it; 9.99 USD
    /// unless told), and `fields` set over the rest (an offer, a quantity, `FAMILY_SHARED`).
    /// - Returns: the compact JWS and its payload.
    public static func signedTransaction(
        bundleID: String, productID: String, days: Double? = nil, environment: String = "Sandbox", authority: MockAppleJWSAuthority,
        now: Date = Date(), price: Money? = defaultPrice, fields: [String: JSONValue] = [:]
    ) throws -> (jws: String, payload: JSONValue) {
        let milliseconds = (now.timeIntervalSince1970 * 1000).rounded()
        // Apple's ids are decimal and grow; time in microseconds plus randomness keeps them unique.
        let id = String(UInt64(now.timeIntervalSince1970 * 1_000_000) &* 10 &+ UInt64.random(in: 0...9))
        var payload: [String: JSONValue] = [
            "transactionId": .string(id), "originalTransactionId": .string(id), "bundleId": .string(bundleID),
            "productId": .string(productID), "purchaseDate": .number(milliseconds), "originalPurchaseDate": .number(milliseconds),
            "quantity": .number(1), "type": .string(days == nil ? "Non-Consumable" : "Auto-Renewable Subscription"),
            "inAppOwnershipType": .string("PURCHASED"), "signedDate": .number(milliseconds), "environment": .string(environment),
            "transactionReason": .string("PURCHASE"), "storefront": .string("USA"), "storefrontId": .string("143441"),
        ]
        if let days {
            payload["expiresDate"] = .number(milliseconds + days * 86_400_000)
            payload["webOrderLineItemId"] = .string(String(UInt64(id)! &+ 1))
            payload["subscriptionGroupIdentifier"] = .string("group-\(bundleID)")
        }
        if let price {
            payload["price"] = .number(Double(price.milli))
            payload["currency"] = .string(price.currency.rawValue)
        }
        payload.merge(fields) { _, given in given }
        return (try authority.sign(.object(payload)), .object(payload))
    }

    /// What a forged or mock transaction costs unless told: 9.99 USD.
    public static let defaultPrice: Money? = Money(milli: 9990, currency: "USD")
}
