import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Base64url and compact JWS parsing")
struct Base64URLTests {
    @Test("Round trips for every length, matches Foundation's base64 with the URL alphabet, and refuses what is not canonical")
    func roundTrip() {
        var rng = SeededGenerator(seed: 64)
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let encoded = Base64URL.encode(bytes)
            let foundation = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(encoded == foundation)
            #expect(Base64URL.decode(encoded) == bytes)
            #expect(Base64URL.decode(encoded + String(repeating: "=", count: (4 - encoded.count % 4) % 4)) == bytes)
        }
        #expect(Base64URL.decode("a") == nil)
        #expect(Base64URL.decode("ab+/") == nil)
        #expect(Base64URL.decode("ab c") == nil)
        // "QR" and "QQ" both start with 0x41, but only "QQ" leaves the unused bits zero.
        #expect(Base64URL.decode("QQ") == [0x41])
        #expect(Base64URL.decode("QR") == nil)
    }

    @Test("Compact JWS: three segments, a JSON object header, ES256 with an x5c array of base64 DER")
    func compact() throws {
        func header(_ json: String) -> String { Base64URL.encode(Array(json.utf8)) }
        let jws = try CompactJWS("\(header(#"{"alg":"ES256","x5c":["AQID","BAU="]}"#)).e30.AAEC")
        #expect(jws.x5c == [[1, 2, 3], [4, 5]])
        #expect(jws.payload == Array("{}".utf8))
        #expect(jws.signature == [0, 1, 2])
        #expect(jws.signingInput == Array("\(header(#"{"alg":"ES256","x5c":["AQID","BAU="]}"#)).e30".utf8))
        #expect(throws: JWSFailure.malformedJWS) { try CompactJWS("\(header("[1]")).e30.AAEC") }
        #expect(throws: JWSFailure.unsupportedAlgorithm) { try CompactJWS("\(header(#"{"alg":["ES256"],"x5c":["AQID"]}"#)).e30.AAEC") }
        #expect(throws: JWSFailure.missingCertificateChain) { try CompactJWS("\(header(#"{"alg":"ES256","x5c":[]}"#)).e30.AAEC") }
        #expect(throws: JWSFailure.certificateChainTooLong) {
            try CompactJWS("\(header(#"{"alg":"ES256","x5c":["AQID","AQID","AQID","AQID","AQID"]}"#)).e30.AAEC")
        }
        #expect(throws: JWSFailure.malformedCertificateChain) { try CompactJWS("\(header(#"{"alg":"ES256","x5c":["AQID","!"]}"#)).e30.AAEC") }
        #expect(CompactJWS.looksLikeJWS("eyJh.eyJ0.c2ln"))
        #expect(!CompactJWS.looksLikeJWS("MIIT...base64+/="))
    }

    @Test("Expectations: bundle, app id and environment, at the top level or under a notification's data")
    func expectation() {
        let transaction: JSONValue = .object(["bundleId": .string("com.a"), "environment": .string("Sandbox")])
        #expect(JWSExpectation(bundleIDs: ["com.a", "com.a.mac"]).failure(for: transaction) == nil)
        #expect(JWSExpectation(bundleIDs: ["com.b"]).failure(for: transaction) == .bundleIDMismatch)
        #expect(JWSExpectation(bundleIDs: ["com.a"], environment: "Production").failure(for: transaction) == .environmentMismatch)
        let notification: JSONValue = .object(["data": .object(["bundleId": .string("com.a"), "appAppleId": .number(42)])])
        #expect(JWSExpectation(bundleIDs: ["com.a"], appAppleID: 42).failure(for: notification) == nil)
        #expect(JWSExpectation(bundleIDs: ["com.a"], appAppleID: 43).failure(for: notification) == .appAppleIDMismatch)
        // A renewal info names no bundle: nothing to compare.
        #expect(JWSExpectation(bundleIDs: ["com.b"]).failure(for: .object(["autoRenewStatus": .number(1)])) == nil)
    }
}
