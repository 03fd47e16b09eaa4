import DevTools
import Foundation
import OpenSSL
import ReceiptTesting
import SystemTesting
import Testing

/// A CA → leaf hierarchy made once per run (RSA key generation is the slow part).
private final class TestPKI: Sendable {
    static let shared: TestPKI? = try? TestPKI()

    let caKey: PrivateKey
    let ca: Certificate
    let leafKey: PrivateKey
    let leaf: Certificate
    let otherRoot: Certificate
    /// The CA is valid for ten years around now; the leaf only from a day ago for thirty days.
    let leafValidFrom = Date(timeIntervalSinceNow: -86400)
    let leafValidTo = Date(timeIntervalSinceNow: 30 * 86400)

    init() throws {
        caKey = try PrivateKey.generateRSA(bits: 2048)
        ca = try CertificateFactory.selfSigned(
            CertificateRequestSpec(
                commonName: "receiptq Test Root CA", organization: "receiptq tests", isCA: true,
                validFrom: Date(timeIntervalSinceNow: -5 * 365 * 86400), validTo: Date(timeIntervalSinceNow: 5 * 365 * 86400),
                serial: 1
            ),
            key: caKey
        )
        leafKey = try PrivateKey.generateRSA(bits: 2048)
        leaf = try CertificateFactory.issue(
            CertificateRequestSpec(
                commonName: "Mac App Store and iTunes Store Receipt Signing (test)", organization: "receiptq tests",
                isCA: false, validFrom: leafValidFrom, validTo: leafValidTo, serial: 2
            ),
            publicKeyOf: leafKey, issuer: ca, issuerKey: caKey
        )
        let otherKey = try PrivateKey.generateRSA(bits: 2048)
        otherRoot = try CertificateFactory.selfSigned(CertificateRequestSpec(commonName: "Unrelated Root", isCA: true), key: otherKey)
    }
}

private func pki() throws -> TestPKI {
    try #require(TestPKI.shared, "could not build the test PKI")
}

@Suite("OpenSSL façade: digests, keys, certificates", .blockingWork)
struct OpenSSLPrimitiveTests {
    @Test func knownDigestVectors() {
        #expect(Digest.hex(Digest.sha256([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Digest.hex(Digest.sha256("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Digest.hex(Digest.sha1([UInt8]())) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(Digest.hex(Digest.sha1("abc".utf8)) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Digest.sha256([UInt8](repeating: 0, count: 100)[10...]).count == 32)
    }

    @Test func secureRandomBytes() {
        let first = SecureRandom.bytes(32)
        #expect(first.count == 32)
        #expect(first != SecureRandom.bytes(32))
        #expect(SecureRandom.bytes(0).isEmpty)
    }

    @Test func keyAndCertificateRoundTrip() throws {
        let pki = try pki()
        let pem = try pki.leafKey.pemPKCS8()
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(try PrivateKey(pem: pem).pemPKCS8() == pem)

        #expect(pki.ca.pem.hasPrefix("-----BEGIN CERTIFICATE-----"))
        let fromPEM = try Certificate(pem: pki.leaf.pem)
        let fromDER = try Certificate(der: pki.leaf.der)
        #expect(fromPEM.der == pki.leaf.der)
        #expect(fromDER.sha256Fingerprint == pki.leaf.sha256Fingerprint)
        #expect(fromDER.subjectCommonName == "Mac App Store and iTunes Store Receipt Signing (test)")
        #expect(abs(fromDER.notBefore.timeIntervalSince(pki.leafValidFrom)) < 1)
        #expect(abs(fromDER.notAfter.timeIntervalSince(pki.leafValidTo)) < 1)
        let fingerprint = pki.leaf.sha256Fingerprint
        #expect(fingerprint.count == 32 * 3 - 1)
        #expect(fingerprint.split(separator: ":").allSatisfy { $0.count == 2 && $0.allSatisfy { $0.isHexDigit && !$0.isLowercase } })

        #expect(ChainVerifier.verify(pki.leaf, intermediates: [], trustedRoots: [pki.ca], at: nil) == (true, nil))
        #expect(ChainVerifier.verify(pki.leaf, intermediates: [], trustedRoots: [pki.otherRoot], at: nil) == (false, "untrusted_chain"))
        #expect(ChainVerifier.verify(pki.ca, intermediates: [], trustedRoots: [pki.ca], at: nil).valid)
    }

    @Test func badInputsThrowDecodeErrors() {
        #expect(throws: OpenSSLError(.decode, message: "")) { try Certificate(pem: "not a certificate") }
        #expect(throws: OpenSSLError(.decode, message: "")) { try Certificate(der: [0x30, 0x03, 0x02, 0x01]) }
        #expect(throws: OpenSSLError(.decode, message: "")) { try Certificate(der: []) }
        #expect(throws: OpenSSLError(.decode, message: "")) { try PrivateKey(pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n") }
        #expect(throws: OpenSSLError.self) { try Certificate.loadAll(pemFile: "/nonexistent/bundle.pem") }
    }

    @Test func loadAllReadsABundle() throws {
        let pki = try pki()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bundle-\(UUID().uuidString).pem").path
        try (pki.ca.pem + pki.leaf.pem).write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let loaded = try Certificate.loadAll(pemFile: path)
        #expect(loaded.map(\.der) == [pki.ca.der, pki.leaf.der])
    }

    @Test func rawRSASHA1Signature() throws {
        let pki = try pki()
        // Signed with the openssl CLI so the check is independent of this façade's signing code.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-rsa-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let data: [UInt8] = [2] + Array("purchase-info".utf8)
        try Data(data).write(to: dir.appendingPathComponent("data"))
        try pki.leafKey.pemPKCS8().write(to: dir.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
        let result = try ChildProcess.run(["openssl", "dgst", "-sha1", "-sign", "key.pem", "-out", "sig", "data"], directory: dir.path)
        try #require(result.status == 0)
        let signature = try [UInt8](Data(contentsOf: dir.appendingPathComponent("sig")))
        #expect(RSASignature.verifySHA1(signature: signature, data: data, certificate: pki.leaf))
        #expect(!RSASignature.verifySHA1(signature: signature, data: data + [0], certificate: pki.leaf))
        #expect(!RSASignature.verifySHA1(signature: signature, data: data, certificate: pki.ca))
        #expect(!RSASignature.verifySHA1(signature: [1, 2, 3], data: data, certificate: pki.leaf))
    }
}

@Suite("OpenSSL façade: PKCS#7", .blockingWork)
struct PKCS7Tests {
    private static let content: [UInt8] = [0x31, 0x00, 0xFF] + Array("receiptq-unique-content-marker".utf8) + [0x00]

    @Test(arguments: [PKCS7.DigestAlgorithm.sha1, .sha256])
    func signThenVerify(digest: PKCS7.DigestAlgorithm) throws {
        let pki = try pki()
        let der = try PKCS7.sign(content: Self.content, signer: pki.leaf, key: pki.leafKey, chain: [pki.ca], digest: digest)
        let result = PKCS7.verify(der: der, trustedRoots: [pki.ca], at: Date())
        #expect(result.valid, "\(result)")
        #expect(result.reason == nil)
        #expect(result.digest == digest.rawValue)
        #expect(result.content == Self.content)
        #expect(result.signerCommonName == pki.leaf.subjectCommonName)
        #expect(PKCS7.verify(der: der, trustedRoots: [pki.ca], at: nil).valid)
    }

    @Test func tamperedContentIsASignatureMismatch() throws {
        let pki = try pki()
        var der = try PKCS7.sign(content: Self.content, signer: pki.leaf, key: pki.leafKey, chain: [], digest: .sha256)
        let marker = Array("unique-content".utf8)
        let offset = try #require(der.indices.first { der[$0...].starts(with: marker) })
        der[offset] ^= 0x01
        let result = PKCS7.verify(der: der, trustedRoots: [pki.ca], at: nil)
        #expect(!result.valid)
        #expect(result.reason == "signature_mismatch")
        #expect(result.content == nil)
    }

    @Test func unrelatedRootIsUntrusted() throws {
        let pki = try pki()
        let der = try PKCS7.sign(content: Self.content, signer: pki.leaf, key: pki.leafKey, chain: [pki.ca], digest: .sha256)
        let result = PKCS7.verify(der: der, trustedRoots: [pki.otherRoot], at: nil)
        #expect(
            result
                == PKCS7.Verification(
                    valid: false, reason: "untrusted_chain", signerCommonName: pki.leaf.subjectCommonName, digest: "sha256", content: Self.content
                ))
        #expect(PKCS7.verify(der: der, trustedRoots: [], at: nil).reason == "untrusted_chain")
    }

    @Test func validityIsJudgedAtTheGivenTime() throws {
        let pki = try pki()
        let der = try PKCS7.sign(content: Self.content, signer: pki.leaf, key: pki.leafKey, chain: [], digest: .sha1)
        let after = PKCS7.verify(der: der, trustedRoots: [pki.ca], at: pki.leafValidTo.addingTimeInterval(86400))
        #expect(after.valid == false)
        #expect(after.reason == "certificate_expired")
        let before = PKCS7.verify(der: der, trustedRoots: [pki.ca], at: pki.leafValidFrom.addingTimeInterval(-86400))
        #expect(before.reason == "certificate_not_yet_valid")
        #expect(PKCS7.verify(der: der, trustedRoots: [pki.ca], at: pki.leafValidFrom.addingTimeInterval(60)).valid)
    }

    @Test func garbageNeverCrashes() throws {
        let pki = try pki()
        let der = try PKCS7.sign(content: Self.content, signer: pki.leaf, key: pki.leafKey, chain: [pki.ca], digest: .sha256)
        var inputs: [[UInt8]] = [[], [0x30], [0x30, 0x80], [0x00, 0x00], Array("hello".utf8), pki.ca.der, SecureRandom.bytes(4096)]
        inputs += stride(from: 1, to: der.count, by: max(1, der.count / 40)).map { Array(der.prefix($0)) }
        for input in inputs {
            let result = PKCS7.verify(der: input, trustedRoots: [pki.ca], at: nil)
            #expect(!result.valid)
            #expect(["not_pkcs7", "malformed", "not_signed_data", "no_content", "no_signer"].contains(result.reason ?? ""), "\(result)")
        }
        #expect(PKCS7.verify(der: Array(der.prefix(60)), trustedRoots: [pki.ca], at: nil).reason == "malformed")
        #expect(PKCS7.verify(der: Array("hello".utf8), trustedRoots: [pki.ca], at: nil).reason == "not_pkcs7")
    }
}

/// Real Apple receipts and certificates from the shared test-data folder (never copied into the repo).
@Suite(
    "OpenSSL façade: real App Store data", .blockingWork,
    .enabled(if: TestEnvironment.appStoreTestData != nil, "shared/testdata/appstore not found; set RECEIPTQ_TESTDATA"))
struct OpenSSLAppStoreDataTests {
    private static var root: URL { TestEnvironment.appStoreTestData ?? URL(fileURLWithPath: "/nonexistent") }

    private static func expected() throws -> [String: [String: Any]] {
        let data = try Data(contentsOf: root.appendingPathComponent("EXPECTED.json"))
        return try #require(JSONSerialization.jsonObject(with: data) as? [String: [String: Any]])
    }

    private static func appleRoot() throws -> Certificate {
        try #require(Certificate.loadAll(pemFile: root.appendingPathComponent("certs/AppleIncRootCertificate.pem").path).first)
    }

    private static func receipt(_ name: String) throws -> [UInt8] {
        let text = try String(contentsOf: root.appendingPathComponent(name), encoding: .utf8)
        return try [UInt8](#require(Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines))))
    }

    /// `2015-08-13T07:50:46Z` or `2021-04-03T22:38:45+0300`.
    private static func date(_ text: String) throws -> Date {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd'T'HH:mm:ssXX"
        return try #require(formatter.date(from: text), "unparsable date \(text)")
    }

    @Test func appleRootFingerprint() throws {
        #expect(
            try Self.appleRoot().sha256Fingerprint
                == "B0:B1:73:0E:CB:C7:FF:45:05:14:2C:49:F1:29:5E:6E:DA:6B:CA:ED:7E:2C:68:C5:BE:91:B5:A1:10:01:F0:24")
        #expect(try Self.appleRoot().subjectCommonName == "Apple Root CA")
    }

    @Test func unifiedReceiptsVerifyAsExpected() throws {
        let root = try Self.appleRoot()
        var checked = 0
        var passedAtCreation = 0
        for (name, entry) in try Self.expected().sorted(by: { $0.key < $1.key }) where entry["kind"] as? String == "unified" {
            let chain = try #require(entry["signature_chain"] as? [String: Any])
            let der = try Self.receipt(name)
            let created = try Self.date(try #require(entry["receipt_creation_date"] as? String))

            let atCreation = PKCS7.verify(der: der, trustedRoots: [root], at: created)
            #expect(atCreation.valid == (chain["apple_root_at_creation_date"] as? String == "OK"), "\(name): \(atCreation.reason ?? "valid")")
            #expect(atCreation.digest == entry["digest"] as? String, "\(name)")
            if atCreation.valid {
                passedAtCreation += 1
                #expect(atCreation.content?.isEmpty == false, "\(name)")
            } else {
                #expect(atCreation.reason == "untrusted_chain", "\(name)")
            }

            let now = PKCS7.verify(der: der, trustedRoots: [root], at: nil)
            #expect(now.valid == (chain["apple_root_now"] as? String == "OK"), "\(name)")
            #expect(now.reason != nil && now.reason != "signature_mismatch", "\(name): \(now.reason ?? "valid")")
            checked += 1
        }
        #expect(checked == 28)
        #expect(passedAtCreation == 24)
    }

    @Test func xcodeReceiptsVerifyAgainstTheStoreKitTestCertificate() throws {
        let storeKit = try Certificate(
            pem: String(contentsOf: Self.root.appendingPathComponent("certs/StoreKitTestCertificate-tpinappreceipt.pem"), encoding: .utf8))
        let der = try Self.receipt("receipts/tpinappreceipt-xcode.b64")
        let created = try Self.date("2020-07-22T18:33:15+0100")
        // The StoreKit certificate's extended key usage is code signing, which the S/MIME signing
        // purpose check rejects, exactly as it rejects developer certificates under Apple's root.
        let strict = PKCS7.verify(der: der, trustedRoots: [storeKit], at: created)
        #expect(strict.reason == "untrusted_chain")
        let result = PKCS7.verify(der: der, trustedRoots: [storeKit], at: created, checkPurpose: false)
        #expect(result.valid, "\(result.reason ?? "")")
        #expect(result.digest == "sha256")
        #expect(result.signerCommonName == "StoreKit")
    }

    /// iOS 6 transaction receipts: `signature` = version byte ‖ RSA-SHA1 signature ‖ UInt32 length ‖
    /// certificate DER, over version byte ‖ purchase-info.
    @Test func transactionReceiptSignatures() throws {
        let iTunesCA = try Certificate(
            pem: String(contentsOf: Self.root.appendingPathComponent("certs/AppleiTunesStoreCertificationAuthority.pem"), encoding: .utf8))
        let appleRoot = try Self.appleRoot()
        var checked = 0
        for (name, entry) in try Self.expected().sorted(by: { $0.key < $1.key }) where entry["kind"] as? String == "transaction" {
            let plist = String(decoding: try Self.receipt(name), as: UTF8.self)
            let signatureText = try #require(Self.plistValue("signature", in: plist))
            let signature = try [UInt8](#require(Data(base64Encoded: signatureText)))
            let purchaseInfoText = try #require(Self.plistValue("purchase-info", in: plist))
            let purchaseInfo = try [UInt8](#require(Data(base64Encoded: purchaseInfoText)))
            let signatureLength = signature.count - 1 - 4 - Self.certificateLength(signature)
            try #require(signatureLength == 128 || signatureLength == 256, "\(name)")
            let certificate = try Certificate(der: Array(signature[(1 + signatureLength + 4)...]))
            let rsa = Array(signature[1..<(1 + signatureLength)])
            #expect(RSASignature.verifySHA1(signature: rsa, data: [signature[0]] + purchaseInfo, certificate: certificate), "\(name)")
            #expect(!RSASignature.verifySHA1(signature: rsa, data: purchaseInfo, certificate: certificate), "\(name)")

            let purchase = try #require((entry["purchase_info"] as? [String: Any])?["purchase-date-ms"] as? String)
            let purchaseDate = Date(timeIntervalSince1970: try #require(Double(purchase)) / 1000)
            #expect(
                ChainVerifier.verify(certificate, intermediates: [iTunesCA], trustedRoots: [appleRoot], at: purchaseDate) == (true, nil), "\(name)")
            #expect(
                ChainVerifier.verify(certificate, intermediates: [iTunesCA], trustedRoots: [appleRoot], at: nil) == (false, "certificate_expired"),
                "\(name)")
            checked += 1
        }
        #expect(checked == 5)
    }

    private static func certificateLength(_ signature: [UInt8]) -> Int {
        // The certificate is the tail; find the 4-byte big-endian length that precedes a DER SEQUENCE.
        for length in [128, 256] where signature.count > 1 + length + 4 {
            let bytes = signature[(1 + length)..<(1 + length + 4)]
            let value = bytes.reduce(0) { $0 << 8 | Int($1) }
            if value == signature.count - 1 - length - 4 { return value }
        }
        return 0
    }

    private static func plistValue(_ key: String, in plist: String) -> String? {
        guard let keyRange = plist.range(of: "\"\(key)\" = \"") else { return nil }
        let rest = plist[keyRange.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }
}
