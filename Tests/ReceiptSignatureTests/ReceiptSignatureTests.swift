import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// Apple's certificates from the shared test data, split as an operator would configure them.
enum AppleTrust {
    static let directory = TestEnvironment.appStoreTestData?.appendingPathComponent("certs")

    static func certificates(_ names: [String]) throws -> [Certificate] {
        guard let directory else { return [] }
        return try names.flatMap { try Certificate.loadAll(pemFile: directory.appendingPathComponent("\($0).pem").path) }
    }

    static func store(withStoreKit: Bool = false) throws -> TrustStore {
        TrustStore(
            roots: try certificates(["AppleIncRootCertificate", "AppleRootCA-G3"]),
            intermediates: try certificates([
                "AppleWWDRCA-2008-serial19", "AppleWWDRCA-2013-serial01DEBCC4396DA010", "AppleWWDRCAG5", "AppleWWDRCAG6",
                "AppleiTunesStoreCertificationAuthority",
            ]),
            storeKitTestCertificates: withStoreKit ? try certificates(["StoreKitTestCertificate-tpinappreceipt"]) : [])
    }

    /// EXPECTED.json's entries, by receipt file name.
    static func expected() throws -> [String: JSONValue] {
        guard let dir = TestEnvironment.appStoreTestData else { return [:] }
        let json = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: dir.appendingPathComponent("EXPECTED.json")))
        var result: [String: JSONValue] = [:]
        for (key, value) in json.objectValue ?? [:] { result[String(key.split(separator: "/").last ?? "")] = value }
        return result
    }

    static func receiptNames() -> [String] { ((try? expected()) ?? [:]).keys.sorted() }

    static func bytes(_ name: String) throws -> [UInt8] {
        let dir = try #require(TestEnvironment.appStoreTestData)
        return try ReceiptDecoder.base64Bytes(
            String(decoding: try Data(contentsOf: dir.appendingPathComponent("receipts/\(name)")), as: UTF8.self))
    }

    /// EXPECTED.json dates: `2015-09-22T08:55:28Z` or `2020-07-22T18:33:15+0100`.
    static func date(_ text: String?) -> Date? {
        guard var text else { return nil }
        if let match = text.range(of: #"[+-]\d{4}$"#, options: .regularExpression) {
            let offset = text[match]
            text.replaceSubrange(match, with: "\(offset.prefix(3)):\(offset.suffix(2))")
        }
        return ISO8601DateFormatter().date(from: text)
    }
}

@Suite("Receipt signatures and inspect, on Apple's real receipts")
struct RealReceiptSignatureTests {
    @Test("inspect agrees with EXPECTED.json: fields, digest, and the chain at the receipt's date and now", arguments: AppleTrust.receiptNames())
    func agreesWithExpected(name: String) throws {
        let expected = try #require(try AppleTrust.expected()[name])
        let bytes = try AppleTrust.bytes(name)
        let verifier = ReceiptSignatureVerifier(trustStore: try AppleTrust.store())
        let report = try ReceiptInspector.inspect(bytes: bytes, verifier: verifier)
        let now = try ReceiptInspector.inspect(bytes: bytes, verifier: verifier, time: .now)
        let signature = try #require(report["signature"])
        #expect(now["signature"]?["valid"] == .bool(false), "every Apple signing certificate of the corpus has expired")

        if expected["kind"]?.stringValue == "transaction" {
            #expect(report["style"]?.stringValue == "transaction")
            #expect(report["environment"]?.stringValue == expected["environment"]?.stringValue)
            #expect(report["bundle_id"]?.stringValue == expected["purchase_info"]?["bid"]?.stringValue)
            #expect(report["in_app"]?.arrayValue?.first?["transaction_id"]?.stringValue == expected["purchase_info"]?["transaction-id"]?.stringValue)
            let chainOK = expected["cert_chain"]?["attime=purchase-date"]?.stringValue == "OK"
            let signatureOK = expected["signature_check"]?["version||purchase-info"]?.stringValue == "OK"
            #expect(signature["valid"] == .bool(chainOK && signatureOK))
            #expect(signature["digest"]?.stringValue == "sha1")
            #expect(now["signature"]?["reason"]?.stringValue == "certificate_expired")
            return
        }
        #expect(report["style"]?.stringValue == "unified")
        #expect(report["bundle_id"]?.stringValue == expected["bundle_id"]?.stringValue)
        #expect(report["environment"]?.stringValue == expected["environment"]?.stringValue)
        #expect(report["application_version"]?.stringValue == expected["application_version"]?.stringValue)
        #expect(report["original_application_version"]?.stringValue == expected["original_application_version"]?.stringValue)
        #expect(AppleTrust.date(report["creation_date"]?.stringValue) == AppleTrust.date(expected["receipt_creation_date"]?.stringValue))
        let inApp = try #require(report["in_app"]?.arrayValue)
        #expect(inApp.count == expected["in_app_count"]?.intValue)
        #expect(
            inApp.compactMap { $0["transaction_id"]?.stringValue }.sorted()
                == (expected["in_app"]?.arrayValue ?? []).compactMap { $0["transaction_id"]?.stringValue }.sorted())
        let chain = try #require(expected["signature_chain"])
        #expect(signature["valid"] == .bool(chain["apple_root_at_creation_date"]?.stringValue == "OK"))
        if chain["apple_root_at_creation_date"]?.stringValue == "OK" {
            #expect(signature["digest"]?.stringValue == expected["digest"]?.stringValue)
            #expect(signature["reason"] == .null)
            #expect(signature["signer"]?.stringValue?.isEmpty == false)
        }
        if chain["storekit_test_certificate"]?.stringValue == "OK" {
            // Xcode receipts: untrusted until the operator trusts the StoreKit test certificate.
            #expect(signature["reason"]?.stringValue == "untrusted_chain")
            let trusted = ReceiptSignatureVerifier(trustStore: try AppleTrust.store(withStoreKit: true))
            #expect(try ReceiptInspector.inspect(bytes: bytes, verifier: trusted)["signature"]?["valid"] == .bool(true))
        }
    }

    @Test("Without trust roots nothing verifies, and the reason says why")
    func noTrustRoots() throws {
        guard let name = AppleTrust.receiptNames().first else { return }
        let report = try ReceiptInspector.inspect(bytes: try AppleTrust.bytes(name), verifier: nil)
        #expect(report["signature"]?["reason"]?.stringValue == "no_trust_roots")
    }
}

@Suite("Receipt signatures on forged and tampered receipts")
struct ForgedReceiptSignatureTests {
    static let authority = Result { try TestCertificateAuthority.generate() }
    static let stranger = Result { try TestCertificateAuthority.generate(name: "Some Other CA") }

    var verifier: ReceiptSignatureVerifier {
        get throws { ReceiptSignatureVerifier(trustStore: TrustStore(roots: [try Self.authority.get().root])) }
    }

    func forged(_ digest: PKCS7.DigestAlgorithm = .sha256, authority: TestCertificateAuthority? = nil) throws -> ([UInt8], AppReceipt) {
        let receipt = ReceiptForger.demoReceipt(bundleID: "com.example.forged")
        return (try ReceiptForger.unified(receipt, authority: authority ?? Self.authority.get(), digest: digest), receipt)
    }

    @Test("A forged receipt verifies against its CA, with SHA-1 and SHA-256 signers", arguments: [PKCS7.DigestAlgorithm.sha1, .sha256])
    func forgedVerifies(digest: PKCS7.DigestAlgorithm) throws {
        let (bytes, receipt) = try forged(digest)
        let decoded = try ReceiptDecoder.decode(bytes: bytes)
        #expect(decoded.bundleID == receipt.bundleID)
        #expect(decoded.inApp == receipt.inApp)
        let result = try verifier.verify(bytes: bytes, receipt: decoded)
        #expect(result == SignatureResult(valid: true, reason: nil, signer: "receiptq Test Receipt Signing", digest: digest.rawValue))
    }

    @Test("A receipt signed by another CA is untrusted")
    func otherCA() throws {
        let (bytes, _) = try forged(authority: try Self.stranger.get())
        let result = try verifier.verify(bytes: bytes, receipt: try ReceiptDecoder.decode(bytes: bytes))
        #expect(result.valid == false)
        #expect(result.reason == "untrusted_chain")
    }

    @Test("A tampered payload (bundle id changed in place) fails with signature_mismatch")
    func tampered() throws {
        var (bytes, _) = try forged()
        let needle = Array("com.example.forged".utf8)
        let index = try #require((0...(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle })
        bytes[index + 4] = UInt8(ascii: "X")  // "com.Xxample.forged": still a valid receipt
        let decoded = try ReceiptDecoder.decode(bytes: bytes)
        #expect(decoded.bundleID == "com.Xxample.forged")
        let result = try verifier.verify(bytes: bytes, receipt: decoded)
        #expect(result.valid == false)
        #expect(result.reason == "signature_mismatch")
    }

    @Test("Judged now, a certificate that expired fails; at the receipt's date it passes")
    func timeMatters() throws {
        var receipt = ReceiptForger.demoReceipt(bundleID: "com.example.old")
        receipt.creationDate = Date().addingTimeInterval(-200 * 86_400)  // CA valid from a year ago
        let bytes = try ReceiptForger.unified(receipt, authority: Self.authority.get())
        let decoded = try ReceiptDecoder.decode(bytes: bytes)
        #expect(try verifier.verify(bytes: bytes, receipt: decoded, time: .receiptDate).valid)
        let future = try verifier.verify(bytes: bytes, receipt: decoded, time: .at(Date().addingTimeInterval(20 * 365 * 86_400)))
        #expect(future.reason == "certificate_expired")
    }

    @Test("A forged iOS 6 transaction receipt verifies; a changed purchase-info does not")
    func transaction() throws {
        var receipt = ReceiptForger.demoReceipt(bundleID: "com.example.ios6")
        receipt.inApp = [receipt.inApp[1]]
        let bytes = try ReceiptForger.transaction(receipt, authority: Self.authority.get())
        let decoded = try ReceiptDecoder.decode(bytes: bytes)
        #expect(decoded.style == .transaction)
        #expect(decoded.bundleID == "com.example.ios6")
        #expect(decoded.inApp.first?.transactionID == receipt.inApp[0].transactionID)
        #expect(decoded.inApp.first?.expiresDate != nil)
        #expect(try verifier.verify(bytes: bytes, receipt: decoded).valid)

        var tampered = decoded
        tampered.transactionPurchaseInfo = decoded.transactionPurchaseInfo.map { $0 + [0x20] }
        #expect(try verifier.verify(bytes: bytes, receipt: tampered).reason == "signature_mismatch")
        var unsigned = decoded
        unsigned.transactionSignature = nil
        #expect(try verifier.verify(bytes: bytes, receipt: unsigned).reason == "no_signature")
    }

    @Test("An iOS 6 signer issued through any intermediate but the iTunes Store CA is refused")
    func transactionChainOnlyThroughITunesStoreCA() throws {
        let root = try Self.authority.get()
        func authority(through intermediateName: String) throws -> (TestCertificateAuthority, Certificate) {
            let window = (Date().addingTimeInterval(-86_400), Date().addingTimeInterval(86_400 * 365))
            let intermediateKey = try PrivateKey.generateRSA()
            let intermediate = try CertificateFactory.issue(
                CertificateRequestSpec(
                    commonName: intermediateName, organization: "t", isCA: true, validFrom: window.0, validTo: window.1, serial: 10),
                publicKeyOf: intermediateKey, issuer: root.root, issuerKey: root.rootKey)
            let leafKey = try PrivateKey.generateRSA()
            let leaf = try CertificateFactory.issue(
                CertificateRequestSpec(
                    commonName: "Some Developer", organization: "t", isCA: false, validFrom: window.0, validTo: window.1, serial: 11),
                publicKeyOf: leafKey, issuer: intermediate, issuerKey: intermediateKey)
            return (TestCertificateAuthority(root: root.root, rootKey: root.rootKey, signer: leaf, signerKey: leafKey), intermediate)
        }
        var receipt = ReceiptForger.demoReceipt(bundleID: "com.example.ios6")
        receipt.inApp = [receipt.inApp[0]]
        for (name, expectValid) in [("Fake Worldwide Developer Relations CA", false), ("Apple iTunes Store Certification Authority", true)] {
            let (signing, intermediate) = try authority(through: name)
            let bytes = try ReceiptForger.transaction(receipt, authority: signing)
            let store = TrustStore(roots: [root.root], intermediates: [intermediate])
            let result = ReceiptSignatureVerifier(trustStore: store).verify(bytes: bytes, receipt: try ReceiptDecoder.decode(bytes: bytes))
            #expect(result.valid == expectValid, "\(name)")
            if !expectValid { #expect(result.reason == "untrusted_chain") }
        }
    }

    @Test("inspect reports every field the contract names, with Apple's names")
    func inspectShape() throws {
        let (bytes, _) = try forged()
        let report = try ReceiptInspector.inspect(bytes: bytes, verifier: try verifier)
        #expect(
            Set(report.objectValue?.keys.map { $0 } ?? [])
                == [
                    "style", "bundle_id", "environment", "application_version", "original_application_version", "creation_date",
                    "in_app", "signature",
                ])
        let purchase = try #require(report["in_app"]?.arrayValue?.last?.objectValue)
        #expect(
            Set(purchase.keys)
                == [
                    "product_id", "transaction_id", "original_transaction_id", "purchase_date", "original_purchase_date",
                    "expires_date", "cancellation_date", "quantity", "web_order_line_item_id", "is_trial_period",
                    "is_in_intro_offer_period",
                ])
        #expect(purchase["is_trial_period"] == .bool(true))
        #expect(purchase["expires_date"]?.stringValue?.hasSuffix("Z") == true)
        #expect(Set(report["signature"]?.objectValue?.keys.map { $0 } ?? []) == ["valid", "reason", "signer", "digest"])
    }

    @Test("Garbage and truncated receipts are decoding errors, never crashes")
    func garbage() throws {
        let (bytes, _) = try forged()
        for cut in stride(from: 0, to: bytes.count, by: max(1, bytes.count / 50)) {
            let truncated = Array(bytes.prefix(cut))
            if let receipt = try? ReceiptDecoder.decode(bytes: truncated) {
                #expect(try verifier.verify(bytes: truncated, receipt: receipt).valid == false)
            }
        }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptInspector.inspect(bytes: Array("hello".utf8), verifier: nil) }
    }
}
