import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// Apple's own signed notifications: verified against Apple Root CA - G3 at their signed date,
/// nested JWS included, then decoded for the worker.
@Suite("Apple's signed notifications decoded")
struct AppleNotificationTests {
    @Test("Apple's TEST and CONSUMPTION_REQUEST notifications verify (payload and nested transaction) and change no state")
    func appleSigned() throws {
        let verifier = JWSVerifier(trustStore: try AppleSignedData.rootG3())
        for (file, type) in [
            ("v2-test-notification-signedPayload.json", "TEST"), ("gopay-v2-consumption_request-production.json", "CONSUMPTION_REQUEST"),
        ] {
            let jws = try AppleSignedData.signedPayload(file)
            let verified = try verifier.verify(jws).get()
            let notification = try AppleNotification.v2(signedPayload: jws)
            #expect(notification.type == type)
            #expect(notification.version == .v2)
            #expect(!notification.uuid.isEmpty)
            #expect(notification.signedDate == verified.signedDate)
            if let nested = try JWSNotificationPayload(json: verified.payload).signedTransactionInfo {
                #expect(throws: Never.self) { try verifier.verify(nested).get() }
                #expect(notification.transaction?["transactionId"] != nil)
                // Operators see the nested transaction decoded in place.
                #expect(notification.display["data"]?["signedTransactionInfo"]?["transactionId"] == notification.transaction?["transactionId"])
            }
            #expect(!notification.effect.changesState)
        }
    }

    @Test("The app-store-server-library's test-CA notification is refused against Apple's root")
    func foreignChain() throws {
        let verifier = JWSVerifier(trustStore: try AppleSignedData.rootG3())
        let jws = try AppleSignedData.signedPayload("applelib-mock-testNotification-testCA.json")
        #expect(verifier.verify(jws).failure != nil)
    }

    @Test("A JWS that is not a notification does not decode as one")
    func notANotification() throws {
        let authority = try MockAppleJWSAuthority.generate()
        let (jws, _) = try ReceiptForger.signedTransaction(bundleID: "com.example.app", productID: "p", authority: authority)
        #expect(throws: JWSFailure.malformedPayload) { try AppleNotification.v2(signedPayload: jws) }
        #expect(throws: JWSFailure.self) { try AppleNotification.v2(signedPayload: "not a jws") }
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}
