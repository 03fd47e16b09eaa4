import Foundation
import ReceiptCore
import Testing

/// The support requests' own rules, checked before Apple is called, and Apple's answers read
/// into closed failures.
@Suite("Support requests and Apple's support errors")
struct SupportRequestTests {
    @Test("Extend: 1–90 days, a reason 0–3, a decimal transaction id; each mistake names its field")
    func renewalExtension() throws {
        let ok = try RenewalExtension(originalTransactionID: "2000000123", days: 90, reason: 3, requestIdentifier: UUID())
        #expect(ok.days == 90 && ok.reason == .serviceIssueOrOutage)
        for (days, reason, id, field) in [
            (91, 1, "2000000123", "extend_by_days"), (0, 1, "2000000123", "extend_by_days"), (30, 4, "2000000123", "extend_reason_code"),
            (30, -1, "2000000123", "extend_reason_code"), (30, 1, "12a", "original_transaction_id"), (30, 1, "", "original_transaction_id"),
            (30, 1, "1/../2", "original_transaction_id"),
        ] {
            #expect(throws: SupportInputError.self) {
                try RenewalExtension(originalTransactionID: id, days: days, reason: reason, requestIdentifier: UUID())
            }
            do {
                _ = try RenewalExtension(originalTransactionID: id, days: days, reason: reason, requestIdentifier: UUID())
            } catch {
                #expect(error.field == field, "\(days) \(reason) \(id)")
            }
        }
    }

    @Test("Mass extension: a printable product id and alpha-3 storefronts")
    func massExtension() throws {
        let ok = try MassRenewalExtension(
            productID: "com.example.monthly", days: 1, reason: 0, requestIdentifier: UUID(), storefrontCountryCodes: ["USA", "FRA"])
        #expect(ok.storefrontCountryCodes == ["USA", "FRA"])
        for (product, codes, field) in [
            ("", [String](), "product_id"), ("a b", [], "product_id"), ("p", ["US"], "storefront_country_codes"),
            ("p", ["usa"], "storefront_country_codes"),
        ] {
            do {
                _ = try MassRenewalExtension(productID: product, days: 1, reason: 0, requestIdentifier: UUID(), storefrontCountryCodes: codes)
                Issue.record("\(product) \(codes) accepted")
            } catch {
                #expect(error.field == field)
            }
        }
        #expect(throws: SupportInputError(field: "extend_by_days", reason: "must be an integer in 1...90")) {
            try MassRenewalExtension(productID: "p", days: 91, reason: 0, requestIdentifier: UUID())
        }
    }

    @Test("Apple's support errors: 401, retryable codes, unknown ids, refused values, bare statuses")
    func classify() {
        #expect(SupportFailure.classify(status: 401, appleCode: nil) == .unauthorized)
        #expect(SupportFailure.classify(status: 404, appleCode: 4_040_005) == .transactionNotFound)
        #expect(SupportFailure.classify(status: 404, appleCode: 4_040_008, notFound: .testNotificationNotFound) == .testNotificationNotFound)
        #expect(SupportFailure.classify(status: 404, appleCode: 4_040_006) == .appleUnavailable)
        #expect(SupportFailure.classify(status: 400, appleCode: 4_000_009) == .refusedByApple(code: 4_000_009))
        #expect(SupportFailure.classify(status: 404, appleCode: nil, notFound: .orderNotFound) == .orderNotFound)
        #expect(SupportFailure.classify(status: 500, appleCode: 5_000_000) == .appleUnavailable)
        #expect(SupportFailure.classify(status: 502, appleCode: nil) == .appleUnavailable)
    }

    @Test("Apple's per-endpoint limits: 20/s extend and account token, 1/s mass extension and test notifications, a tenth in the sandbox")
    func limits() {
        #expect(ServerAPIEndpoint.extendRenewalDate.ratePerSecond(in: .production) == 20)
        #expect(ServerAPIEndpoint.setAppAccountToken.ratePerSecond(in: .production) == 20)
        #expect(ServerAPIEndpoint.lookUpOrderID.ratePerSecond(in: .production) == 10)
        for endpoint in [ServerAPIEndpoint.massExtendRenewalDate, .massExtensionStatus, .testNotification, .testNotificationStatus] {
            #expect(endpoint.ratePerSecond(in: .production) == 1)
            #expect(endpoint.ratePerSecond(in: .sandbox) == 0.1)
        }
    }
}
