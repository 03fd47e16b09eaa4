import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// `verify` (cached certificates and chain verdicts) against `verifyReference` (OpenSSL's full
/// parse and chain building on every call): they must agree on every receipt, at every time.
@Suite("Cached signature verification gives the reference path's results")
struct CachedSignatureVerificationTests {
    static let times: [VerificationTime] = [
        .receiptDate, .now,
        .at(Date(timeIntervalSince1970: 946_684_800)),  // 2000-01-01, before every Apple certificate
        .at(Date(timeIntervalSince1970: 1_420_070_400)),  // 2015-01-01
        .at(Date(timeIntervalSince1970: 1_577_836_800)),  // 2020-01-01
        .at(Date(timeIntervalSince1970: 4_102_444_800)),  // 2100-01-01
    ]

    private func expectSame(
        _ verifier: ReceiptSignatureVerifier, _ bytes: [UInt8], _ receipt: AppReceipt, _ label: String,
        times: [VerificationTime] = times, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        for time in times {
            let reference = verifier.verifyReference(bytes: bytes, receipt: receipt, time: time)
            // Twice: the first call may fill the caches, the second reads them.
            for call in 1...2 {
                let cached = verifier.verify(bytes: bytes, receipt: receipt, time: time)
                #expect(cached == reference, "\(label) at \(time), call \(call)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test(
        "every corpus receipt, with and without the StoreKit certificate trusted",
        .enabled(if: TestEnvironment.appStoreTestData != nil, "shared/testdata/appstore not found; set RECEIPTQ_TESTDATA"),
        arguments: AppleTrust.receiptNames())
    func corpusReceipt(name: String) throws {
        let bytes = try AppleTrust.bytes(name)
        let receipt = try ReceiptDecoder.decode(bytes: bytes)
        for withStoreKit in [false, true] {
            let verifier = ReceiptSignatureVerifier(trustStore: try AppleTrust.store(withStoreKit: withStoreKit))
            expectSame(verifier, bytes, receipt, "\(name), StoreKit trusted: \(withStoreKit)")
        }
    }

    @Test(
        "Apple's receipts are decided on the cached path, valid at their date and expired now",
        .enabled(if: TestEnvironment.appStoreTestData != nil, "shared/testdata/appstore not found; set RECEIPTQ_TESTDATA"))
    func corpusTakesTheCachedPath() throws {
        let verifier = ReceiptSignatureVerifier(trustStore: try AppleTrust.store(withStoreKit: true))
        var unified = 0
        var appleSigned = 0
        for name in AppleTrust.receiptNames() {
            let bytes = try AppleTrust.bytes(name)
            let receipt = try ReceiptDecoder.decode(bytes: bytes)
            guard receipt.style == .unified else { continue }
            unified += 1
            let result = verifier.verify(bytes: bytes, receipt: receipt)
            #expect(result == verifier.verifyReference(bytes: bytes, receipt: receipt), "\(name)")
            guard receipt.environment != .xcode else { continue }
            #expect(result.valid, "\(name)")
            appleSigned += 1
            #expect(verifier.verify(bytes: bytes, receipt: receipt, time: .now).reason == "certificate_expired", "\(name)")
        }
        #expect(unified == 28)
        #expect(appleSigned == 24)
        // Nothing here needs the reference path: every signature is good (Xcode receipts that no
        // trusted certificate vouches for are untrusted chains, decided on the cached path too).
        #expect(verifier.statistics.referencePath == 0)
        #expect(verifier.statistics.fastPath >= unified + appleSigned)
    }

    @Test(
        "changed bytes in real receipts (SHA-1, SHA-256, Xcode's BER) read as on the reference path",
        .enabled(if: TestEnvironment.appStoreTestData != nil, "shared/testdata/appstore not found; set RECEIPTQ_TESTDATA"),
        arguments: ["aiv-mac-mindnode-hannes.b64", "aiv-mac-mindnode-sha256.b64", "tpinappreceipt-xcode.b64"])
    func mutatedCorpusReceipt(name: String) throws {
        let bytes = try AppleTrust.bytes(name)
        let receipt = try ReceiptDecoder.decode(bytes: bytes)
        let verifier = ReceiptSignatureVerifier(trustStore: try AppleTrust.store(withStoreKit: true))
        for offset in stride(from: 0, to: bytes.count, by: 23) {
            var mutated = bytes
            mutated[offset] ^= 0x04
            // The decoded receipt only supplies the date; the bytes are what is verified.
            expectSame(verifier, mutated, receipt, "\(name) byte \(offset)", times: [.receiptDate])
        }
    }

    @Test("forged, tampered, foreign-CA, expired and not-yet-valid receipts", arguments: [PKCS7.DigestAlgorithm.sha1, .sha256])
    func forgedReceipts(digest: PKCS7.DigestAlgorithm) throws {
        let authority = try ForgedReceiptSignatureTests.authority.get()
        let stranger = try ForgedReceiptSignatureTests.stranger.get()
        var receipt = ReceiptForger.demoReceipt(bundleID: "com.example.cached")
        let good = try ReceiptForger.unified(receipt, authority: authority, digest: digest)
        let foreign = try ReceiptForger.unified(receipt, authority: stranger, digest: digest)
        var tampered = good
        let needle = Array("com.example.cached".utf8)
        let index = try #require((0...(good.count - needle.count)).first { Array(good[$0..<($0 + needle.count)]) == needle })
        tampered[index + 4] = UInt8(ascii: "X")
        receipt.creationDate = authority.signer.notBefore.addingTimeInterval(-1)
        let early = try ReceiptForger.unified(receipt, authority: authority, digest: digest)

        let window = [authority.signer.notBefore, authority.signer.notAfter].flatMap { [$0 - 1, $0, $0 + 1] }
        let times = Self.times + window.map(VerificationTime.at)
        for store in [TrustStore(roots: [authority.root]), TrustStore(roots: [stranger.root], intermediates: [authority.signer])] {
            let verifier = ReceiptSignatureVerifier(trustStore: store)
            for (label, bytes) in [("good", good), ("foreign", foreign), ("tampered", tampered), ("early", early)] {
                expectSame(verifier, bytes, try ReceiptDecoder.decode(bytes: bytes), label, times: times)
            }
        }
        let verifier = ReceiptSignatureVerifier(trustStore: TrustStore(roots: [authority.root]))
        let decoded = try ReceiptDecoder.decode(bytes: good)
        #expect(verifier.verify(bytes: good, receipt: decoded).valid)
        #expect(verifier.verify(bytes: foreign, receipt: decoded).reason == "untrusted_chain")
        #expect(verifier.verify(bytes: tampered, receipt: decoded).reason == "signature_mismatch")
        #expect(verifier.verify(bytes: early, receipt: try ReceiptDecoder.decode(bytes: early)).reason == "certificate_not_yet_valid")
        #expect(verifier.verify(bytes: good, receipt: decoded, time: .at(authority.signer.notAfter)).reason == "certificate_expired")
    }

    @Test("transaction receipts, forged and real, are unaffected")
    func transactionReceipts() throws {
        let authority = try ForgedReceiptSignatureTests.authority.get()
        var receipt = ReceiptForger.demoReceipt(bundleID: "com.example.ios6")
        receipt.inApp = [receipt.inApp[1]]
        let bytes = try ReceiptForger.transaction(receipt, authority: authority)
        let verifier = ReceiptSignatureVerifier(trustStore: TrustStore(roots: [authority.root]))
        expectSame(verifier, bytes, try ReceiptDecoder.decode(bytes: bytes), "forged iOS 6")
    }

    @Test(
        "8 tasks verifying at once agree with the reference results",
        .enabled(if: TestEnvironment.appStoreTestData != nil, "shared/testdata/appstore not found; set RECEIPTQ_TESTDATA"))
    func concurrentVerification() async throws {
        let verifier = ReceiptSignatureVerifier(trustStore: try AppleTrust.store(withStoreKit: true))
        let authority = try ForgedReceiptSignatureTests.authority.get()
        let forgedVerifier = ReceiptSignatureVerifier(trustStore: TrustStore(roots: [authority.root]))
        let forged = try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: "com.example.concurrent"), authority: authority)
        var cases: [(ReceiptSignatureVerifier, [UInt8], AppReceipt, VerificationTime)] = []
        for name in AppleTrust.receiptNames() {
            let bytes = try AppleTrust.bytes(name)
            let receipt = try ReceiptDecoder.decode(bytes: bytes)
            cases.append((verifier, bytes, receipt, .receiptDate))
            cases.append((verifier, bytes, receipt, .now))
        }
        cases.append((forgedVerifier, forged, try ReceiptDecoder.decode(bytes: forged), .receiptDate))
        let expected = cases.map { $0.0.verifyReference(bytes: $0.1, receipt: $0.2, time: $0.3) }
        let allCases = cases
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var mismatches = 0
                    for round in 0..<4 {
                        for offset in allCases.indices {
                            let index = (offset * 7 + task * 5 + round) % allCases.count
                            let (verifier, bytes, receipt, time) = allCases[index]
                            if verifier.verify(bytes: bytes, receipt: receipt, time: time) != expected[index] { mismatches += 1 }
                        }
                    }
                    return mismatches
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0)
    }
}
