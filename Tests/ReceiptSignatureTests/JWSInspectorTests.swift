import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// `receipt inspect` for StoreKit 2: what it prints for Apple's own notifications, their nested
/// signed transactions, and JWS it cannot vouch for.
@Suite("JWS inspect: kind, payload, signature and nested JWS")
struct JWSInspectorTests {
    static var testData: URL? { TestEnvironment.appStoreTestData }

    func signedPayload(_ file: String) throws -> String { try AppleSignedData.signedPayload(file) }

    func appleVerifier() throws -> JWSVerifier { JWSVerifier(trustStore: try AppleSignedData.rootG3()) }

    @Test("Apple's CONSUMPTION_REQUEST: a valid notification whose signed transaction is decoded in place, typed", .enabled(if: testData != nil))
    func nestedTransaction() throws {
        let (json, valid) = try JWSInspector.inspect(try signedPayload("gopay-v2-consumption_request-production.json"), verifier: try appleVerifier())
        #expect(valid)
        #expect(json["kind"] == .string("notification"))
        #expect(json["signature"]?["valid"] == .bool(true))
        #expect(json["signature"]?["reason"] == .null)
        #expect(json["signature"]?["chain"]?.arrayValue?.last == .string("Apple Root CA - G3"))
        let nested = try #require(json["payload"]?["data"]?["signedTransactionInfo"])
        #expect(nested["kind"] == .string("transaction"))
        #expect(nested["signature"]?["valid"] == .bool(true))
        let transaction = try JWSTransactionPayload(json: try #require(nested["payload"]))
        #expect(transaction.transactionID == "510001261072921")
        #expect(transaction.productID == "com.keysns.JR1200")
        #expect(transaction.type == "Consumable")
        #expect(transaction.purchaseDate == Date(timeIntervalSince1970: 1_687_239_036))
        #expect(transaction.storefront == "CHN")
        #expect(transaction.environment == "Production")
    }

    @Test("Under another trust store every level is reported invalid with its reason, and the whole is invalid", .enabled(if: testData != nil))
    func untrusted() throws {
        let authority = try MockAppleJWSAuthority.generate()
        let verifier = JWSVerifier(trustStore: TrustStore(roots: [authority.root]))
        let (json, valid) = try JWSInspector.inspect(try signedPayload("gopay-v2-consumption_request-production.json"), verifier: verifier)
        #expect(!valid)
        #expect(json["signature"]?["reason"] == .string("untrusted_chain"))
        #expect(json["payload"]?["data"]?["signedTransactionInfo"]?["signature"]?["valid"] == .bool(false))
        let (unverified, unverifiedValid) = try JWSInspector.inspect(try signedPayload("v2-test-notification-signedPayload.json"), verifier: nil)
        #expect(!unverifiedValid)
        #expect(unverified["signature"]?["reason"] == .string("no_trust_roots"))
        #expect(unverified["payload"]?["notificationType"] == .string("TEST"))
    }

    @Test(
        "A renewal info from the mock's chain is classified and verified; a valid transaction nested in a forged notification does not make it valid")
    func kinds() throws {
        let authority = try MockAppleJWSAuthority.generate()
        let verifier = JWSVerifier(trustStore: TrustStore(roots: [authority.root]))
        // Signed now: the mock chain was made a moment ago, and a JWS is judged at its signedDate.
        let signedDate = JSONValue.number((Date().timeIntervalSince1970 * 1000).rounded())
        let renewal = try authority.sign(
            .object([
                "originalTransactionId": .string("7"), "autoRenewProductId": .string("pro"), "autoRenewStatus": .number(1), "signedDate": signedDate,
            ]))
        let (renewalJSON, renewalValid) = try JWSInspector.inspect(renewal, verifier: verifier)
        #expect(renewalValid)
        #expect(renewalJSON["kind"] == .string("renewal_info"))

        let transaction = try authority.sign(
            .object([
                "transactionId": .string("8"), "originalTransactionId": .string("7"), "productId": .string("pro"),
                "bundleId": .string("com.example"), "purchaseDate": .number(1_700_000_000_000), "signedDate": signedDate,
            ]))
        let notification = try authority.sign(
            .object([
                "notificationType": .string("DID_RENEW"), "notificationUUID": .string("u"), "signedDate": signedDate,
                "data": .object(["signedTransactionInfo": .string(transaction), "signedRenewalInfo": .string(renewal)]),
            ]))
        let parts = notification.split(separator: ".").map(String.init)
        var signature = try #require(Base64URL.decode(parts[2]))
        signature[5] ^= 0x01
        let forged = "\(parts[0]).\(parts[1]).\(Base64URL.encode(signature))"
        let (json, valid) = try JWSInspector.inspect(forged, verifier: verifier)
        #expect(!valid)
        #expect(json["signature"]?["reason"] == .string("invalid_signature"))
        #expect(json["payload"]?["data"]?["signedTransactionInfo"]?["signature"]?["valid"] == .bool(true))
        #expect(json["payload"]?["data"]?["signedRenewalInfo"]?["kind"] == .string("renewal_info"))
    }

    @Test("Neither a JWS nor a JSON object payload: a named refusal, never a crash")
    func refusals() {
        for text in ["", "garbage", "a.b", "eyJ.eyJ.x", "\(Base64URL.encode(Array("{}".utf8))).\(Base64URL.encode(Array("[1]".utf8))).AA"] {
            #expect(throws: JWSFailure.self) { try JWSInspector.inspect(text, verifier: nil) }
        }
    }
}
