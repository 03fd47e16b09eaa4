import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// StoreKit 2 JWS verification on Apple's own signed data, and on chains made here to exercise
/// every refusal.
@Suite("JWS verification: Apple's chain, markers and ES256")
struct JWSVerifierTests {
    static let authority = try! MockAppleJWSAuthority.generate()

    static var testData: URL? { TestEnvironment.appStoreTestData }

    func signedPayload(_ file: String) throws -> String { try AppleSignedData.signedPayload(file) }

    func appleRootG3() throws -> TrustStore { try AppleSignedData.rootG3() }

    @Test(
        "Apple-signed notifications and their nested signed transaction verify against Apple Root CA - G3 at their signedDate",
        .enabled(if: testData != nil))
    func appleSamples() throws {
        let verifier = JWSVerifier(trustStore: try appleRootG3())
        let notification = try verifier.verify(try signedPayload("gopay-v2-consumption_request-production.json")).get()
        #expect(notification.payload["notificationType"]?.stringValue == "CONSUMPTION_REQUEST")
        #expect(notification.chainSubjects.count == 3)
        #expect(notification.chainSubjects[0].contains("Prod ECC Mac App Store and iTunes Store Receipt Signing"))
        let nested = try #require(notification.payload["data"]?["signedTransactionInfo"]?.stringValue)
        let transaction = try verifier.verify(nested).get()
        #expect(transaction.payload["transactionId"]?.stringValue == "510001261072921")
        #expect(transaction.payload["bundleId"]?.stringValue == "com.jrjj.keysns")
        #expect(transaction.signedDate == Date(timeIntervalSince1970: 1_687_941_512.573))
        let test = try verifier.verify(try signedPayload("v2-test-notification-signedPayload.json")).get()
        #expect(test.payload["notificationType"]?.stringValue == "TEST")
    }

    @Test("Judged now, Apple's expired 2021–2023 leaf is refused; one flipped bit anywhere is refused", .enabled(if: testData != nil))
    func appleSampleRefusals() throws {
        let jws = try signedPayload("gopay-v2-consumption_request-production.json")
        #expect(JWSVerifier(trustStore: try appleRootG3(), time: .now).verify(jws).failureReason == "untrusted_chain")
        let verifier = JWSVerifier(trustStore: try appleRootG3())
        let parts = jws.split(separator: ".").map(String.init)
        var payload = Base64URL.decode(parts[1])!
        payload[payload.count / 2] ^= 0x01
        #expect(verifier.verify("\(parts[0]).\(Base64URL.encode(payload)).\(parts[2])").failureReason == "invalid_signature")
        var signature = Base64URL.decode(parts[2])!
        signature[10] ^= 0x01
        #expect(verifier.verify("\(parts[0]).\(parts[1]).\(Base64URL.encode(signature))").failureReason == "invalid_signature")
        // Another root (the mock's) does not vouch for Apple's chain.
        #expect(JWSVerifier(trustStore: TrustStore(roots: [Self.authority.root])).verify(jws).failureReason == "untrusted_chain")
    }

    @Test("A test CA's JWS (app-store-server-library's mock) is untrusted with Apple's root", .enabled(if: testData != nil))
    func foreignTestCA() throws {
        let jws = try signedPayload("applelib-mock-testNotification-testCA.json")
        #expect(JWSVerifier(trustStore: try appleRootG3()).verify(jws).failureReason == "untrusted_chain")
    }

    @Test("A chain shaped like Apple's verifies when its root is trusted; without markers, or with another root, it does not")
    func mockChain() throws {
        let payload = JSONValue.object([
            "transactionId": .string("2000000000000001"), "bundleId": .string("com.example.a"),
            "signedDate": .number((Date().timeIntervalSince1970 * 1000).rounded()),
        ])
        let jws = try Self.authority.sign(payload)
        let trusted = JWSVerifier(trustStore: TrustStore(roots: [Self.authority.root]))
        #expect(try trusted.verify(jws).get().payload == payload)
        let unmarked = try MockAppleJWSAuthority.generate(markers: false)
        #expect(
            JWSVerifier(trustStore: TrustStore(roots: [unmarked.root])).verify(try unmarked.sign(payload)).failureReason == "missing_apple_marker")
        #expect(JWSVerifier(trustStore: TrustStore(roots: [unmarked.root])).verify(jws).failureReason == "untrusted_chain")
        // A signature by a key the leaf does not hold.
        let parts = jws.split(separator: ".").map(String.init)
        let forged = try ES256.sign(Array("\(parts[0]).\(parts[1])".utf8), key: try PrivateKey.generateP256())
        #expect(trusted.verify("\(parts[0]).\(parts[1]).\(Base64URL.encode(forged))").failureReason == "invalid_signature")
    }

    @Test("alg none and HS256, a missing or garbled x5c, and non-JWS text are refused with their reasons")
    func malformed() throws {
        let verifier = JWSVerifier(trustStore: TrustStore(roots: [Self.authority.root]))
        let payload = Base64URL.encode(Array(#"{"transactionId":"1"}"#.utf8))
        func header(_ json: String) -> String { Base64URL.encode(Array(json.utf8)) }
        let x5c = "[\"\(Data(Self.authority.leaf.der).base64EncodedString())\"]"
        #expect(verifier.verify("\(header(#"{"alg":"none","x5c":\#(x5c)}"#)).\(payload).").failureReason == "unsupported_algorithm")
        #expect(verifier.verify("\(header(#"{"alg":"HS256","x5c":\#(x5c)}"#)).\(payload).c2ln").failureReason == "unsupported_algorithm")
        #expect(verifier.verify("\(header(#"{"alg":"ES256"}"#)).\(payload).c2ln").failureReason == "missing_certificate_chain")
        #expect(verifier.verify("\(header(#"{"alg":"ES256","x5c":"x"}"#)).\(payload).c2ln").failureReason == "missing_certificate_chain")
        #expect(verifier.verify("\(header(#"{"alg":"ES256","x5c":[]}"#)).\(payload).c2ln").failureReason == "missing_certificate_chain")
        #expect(verifier.verify("e30.e30.e30").failureReason == "unsupported_algorithm")
        for text in ["", "a.b", "a.b.c.d", "!!.??.**", ".e30.e30", String(repeating: "a", count: 300_000)] {
            #expect(verifier.verify(text).failureReason == "malformed_jws", "\(text.prefix(20))")
        }
        let notJSON = try Self.authority.sign(.object([:]))
        let parts = notJSON.split(separator: ".").map(String.init)
        #expect(verifier.verify("\(parts[0]).\(Base64URL.encode(Array("[1]".utf8))).\(parts[2])").failureReason == "malformed_payload")
    }

    @Test("A junk x5c (base64 of no certificate, not base64, not a string) and an over-long one each have their own reason")
    func junkAndOverLongChains() throws {
        let verifier = JWSVerifier(trustStore: TrustStore(roots: [Self.authority.root]))
        let payload = Base64URL.encode(Array(#"{"transactionId":"1"}"#.utf8))
        func header(_ json: String) -> String { Base64URL.encode(Array(json.utf8)) }
        for junk in [#"["bm90IGRlcg=="]"#, #"["%%% not base64 %%%"]"#, "[42]", #"[""]"#] {
            let reason = verifier.verify("\(header(#"{"alg":"ES256","x5c":\#(junk)}"#)).\(payload).c2ln").failureReason
            #expect(reason == "malformed_certificate_chain", "\(junk)")
        }
        // Apple's own three certificates with the junk one after them: still junk, not untrusted.
        let leaf = Data(Self.authority.leaf.der).base64EncodedString()
        let withJunk = "[\"\(leaf)\",\"bm90IGRlcg==\"]"
        #expect(verifier.verify("\(header(#"{"alg":"ES256","x5c":\#(withJunk)}"#)).\(payload).c2ln").failureReason == "malformed_certificate_chain")
        let five = "[" + Array(repeating: "\"\(leaf)\"", count: CompactJWS.maxChainLength + 1).joined(separator: ",") + "]"
        #expect(verifier.verify("\(header(#"{"alg":"ES256","x5c":\#(five)}"#)).\(payload).c2ln").failureReason == "certificate_chain_too_long")
        // The stable strings read back to their cases (a stored `response_…` code).
        #expect(FailureCode(rawValue: "response_certificate_chain_too_long") == .responseRejected(.certificateChainTooLong))
        #expect(FailureCode(rawValue: "response_malformed_certificate_chain") == .responseRejected(.malformedCertificateChain))
        #expect(Set(JWSFailure.allCases.map(\.reason)).count == JWSFailure.allCases.count, "one string per case")
    }

    @Test("Seeded mutations of a valid JWS never crash and never verify")
    func fuzz() throws {
        let verifier = JWSVerifier(trustStore: TrustStore(roots: [Self.authority.root]))
        let jws = Array(try Self.authority.sign(.object(["transactionId": .string("1"), "signedDate": .number(1_700_000_000_000)])).utf8)
        var rng = SeededGenerator(seed: 1717)
        for _ in 0..<2000 {
            var mutated = jws
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let index = Int.random(in: 0..<mutated.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: mutated[index] = UInt8.random(in: 0...255, using: &rng)
                case 1: mutated.remove(at: index)
                default: mutated.insert(UInt8.random(in: 32...126, using: &rng), at: index)
                }
            }
            guard mutated != jws else { continue }
            if case .success = verifier.verify(String(decoding: mutated, as: UTF8.self)) {
                // Only a change that decodes back to the same bytes (none here: decoding is canonical) may pass.
                Issue.record("a mutated JWS verified")
            }
        }
    }
}

extension Result where Failure == JWSFailure {
    fileprivate var failureReason: String? {
        if case .failure(let failure) = self { return failure.reason }
        return nil
    }
}
