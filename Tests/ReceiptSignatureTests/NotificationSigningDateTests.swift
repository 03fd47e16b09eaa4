import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// A V2 notification of the 2022 format has no top-level `signedDate`: it is judged at its nested
/// signed transaction's, as that transaction is (issue 41, item 10). Judged now, a real one fails:
/// Apple's signing certificate of 2021–2023 has expired.
@Suite("Notifications without a signedDate: judged at their nested transaction's")
struct NotificationSigningDateTests {
    static let day: TimeInterval = 86_400

    func milliseconds(_ date: Date) -> JSONValue { .number((date.timeIntervalSince1970 * 1000).rounded()) }

    /// A chain whose signing certificate expired a month ago, and a 2022-format notification it
    /// signed two months ago (leaf valid then), with its transaction and renewal info.
    func expiredChainNotification(nested: Bool = true) throws -> (MockAppleJWSAuthority, notification: String, signedAt: Date) {
        let now = Date()
        let authority = try MockAppleJWSAuthority.generate(leafExpiry: now.addingTimeInterval(-30 * Self.day))
        // Whole seconds, as inspect prints them.
        let signedAt = Date(timeIntervalSince1970: now.addingTimeInterval(-60 * Self.day).timeIntervalSince1970.rounded())
        let transaction = try authority.sign(
            .object([
                "transactionId": .string("2000000000000022"), "originalTransactionId": .string("2000000000000022"),
                "productId": .string("pro.monthly"), "bundleId": .string("com.example.v2022"), "purchaseDate": milliseconds(signedAt),
                "type": .string("Auto-Renewable Subscription"), "environment": .string("Production"), "signedDate": milliseconds(signedAt),
            ]))
        let renewal = try authority.sign(
            .object([
                "originalTransactionId": .string("2000000000000022"), "autoRenewProductId": .string("pro.monthly"),
                "autoRenewStatus": .number(1), "signedDate": milliseconds(signedAt),
            ]))
        var data: [String: JSONValue] = ["bundleId": .string("com.example.v2022"), "environment": .string("Production")]
        if nested {
            data["signedTransactionInfo"] = .string(transaction)
            data["signedRenewalInfo"] = .string(renewal)
        }
        // The 2022 format: notificationType, subtype, notificationUUID, version, data; no signedDate.
        let notification = try authority.sign(
            .object([
                "notificationType": .string("DID_RENEW"), "notificationUUID": .string(UUID().uuidString.lowercased()),
                "version": .string("2.0"), "data": .object(data),
            ]))
        return (authority, notification, signedAt)
    }

    @Test("Its chain is judged at the nested transaction's signedDate, so it verifies; without a nested JWS it is judged now and does not")
    func judgedAtTheNestedTransaction() throws {
        let (authority, notification, signedAt) = try expiredChainNotification()
        let verifier = JWSVerifier(trustStore: TrustStore(roots: [authority.root]))
        let verified = try verifier.verify(notification).get()
        #expect(verified.signedDate == signedAt)
        // Nothing to date it by: judged now, when the leaf has expired.
        let (undated, bare, _) = try expiredChainNotification(nested: false)
        let failure = JWSVerifier(trustStore: TrustStore(roots: [undated.root])).verify(bare)
        #expect(failure.map(\.payload) == .failure(.untrustedChain))
        // Judged now on request (`receipt inspect --now`), it fails too.
        #expect(
            JWSVerifier(trustStore: TrustStore(roots: [authority.root]), time: .now).verify(notification).map(\.payload) == .failure(.untrustedChain))
    }

    @Test("receipt inspect shows it valid, with the date it was judged at and whose date that is")
    func inspectShowsTheDate() throws {
        let (authority, notification, signedAt) = try expiredChainNotification()
        let (json, valid) = try JWSInspector.inspect(notification, verifier: JWSVerifier(trustStore: TrustStore(roots: [authority.root])))
        #expect(valid, "the notification and its nested transaction and renewal info")
        #expect(json["signature"]?["valid"] == .bool(true))
        #expect(json["signed"]?["of"] == .string("signedTransactionInfo"))
        #expect(json["signed"]?["date"] == .string(ISO8601DateFormatter().string(from: signedAt)))
        #expect(json["payload"]?["data"]?["signedTransactionInfo"]?["signed"]?["of"] == .string("payload"))
    }

    @Test("The worker dates it by its nested transaction too (not the distant past, which would order it before everything)")
    func workerDatesIt() throws {
        let (_, notification, signedAt) = try expiredChainNotification()
        #expect(try AppleNotification.v2(signedPayload: notification).signedDate == signedAt)
    }

    @Test(
        "Apple's CONSUMPTION_REQUEST without its signedDate would be dated by its real nested transaction, which verifies then",
        .enabled(if: TestEnvironment.appStoreTestData != nil))
    func realNotification() throws {
        let jws = try AppleSignedData.signedPayload("gopay-v2-consumption_request-production.json")
        let payload = try JSONValue.parse(try CompactJWS(jws).payload)
        let own = try #require(JWSSigningDate(of: payload))
        #expect(own.source == .payload)
        // The same payload in the 2022 format (its signature no longer covers it: the date rule alone).
        guard case .object(var fields) = payload else { throw JWSFailure.malformedPayload }
        fields["signedDate"] = nil
        let nested = try #require(JWSSigningDate(of: .object(fields)))
        #expect(nested.source == .signedTransactionInfo)
        let transaction = try #require(payload["data"]?["signedTransactionInfo"]?.stringValue)
        let verified = try JWSVerifier(trustStore: try AppleSignedData.rootG3()).verify(transaction).get()
        #expect(verified.signedDate == nested.date)
        // Apple's leaf (2021–2023) is valid at that date, and expired now.
        #expect(JWSVerifier(trustStore: try AppleSignedData.rootG3(), time: .at(nested.date)).verify(jws).map(\.chainSubjects).isSuccess)
        #expect(JWSVerifier(trustStore: try AppleSignedData.rootG3(), time: .now).verify(jws).map(\.payload) == .failure(.untrustedChain))
    }
}

extension Result {
    fileprivate var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }
}
