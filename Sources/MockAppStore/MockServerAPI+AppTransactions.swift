import DevTools
import Foundation
import Hummingbird
import ReceiptCore

/// The mock's app transactions (issue 42 items 6 and 8):
///
/// - `GET …/inApps/v1/transactions/appTransactions/{transactionId}`: Get App Transaction Info (Server
///   API 1.17, 2025), the app transaction of the customer who made that transaction, signed;
///   `404 {"errorCode":4040010}` for an unknown transaction.
/// - ``MockServerAPIState/appTransaction(bundleID:appAppleID:environment:appTransactionID:originalApplicationVersion:originalPurchaseDate:signedDate:)``:
///   the payload a device's `AppTransaction` carries, for tests and the demo to sign with the mock's
///   authority (the device gets the same JWS from StoreKit 2).
/// - ``MockNotificationCenter/rescindConsent(appTransaction:bundleID:environment:)``: a parent
///   withdraws consent, `RESCIND_CONSENT` with `appData` and no transaction.
extension MockServerAPI {
    static func addAppTransactionRoutes(to router: Router<BasicRequestContext>, state: MockAppStoreState) {
        let api = state.serverAPI
        router.get("/storekit/{environment}/inApps/v1/transactions/appTransactions/{id}") { request, context in
            try await answer(request, context, state: state, operation: "app_transaction") { environment, id, _ in
                guard let transaction = api.transaction(id, in: environment), let history = api.history(of: id, in: environment) else {
                    return notFound()
                }
                let first = history.compactMap { $0["originalPurchaseDate"]?.stringValue.flatMap(Double.init) }.min()
                // One customer, one app transaction: its id follows from the customer's first transaction.
                let firstID = history.compactMap { $0["originalTransactionId"]?.stringValue }.min() ?? id
                let payload = MockServerAPIState.appTransaction(
                    bundleID: transaction["bundleId"]?.stringValue ?? "", appAppleID: nil, environment: environment,
                    appTransactionID: "70\(firstID)", originalApplicationVersion: "1.0",
                    originalPurchaseDate: Date(timeIntervalSince1970: (first ?? 0) / 1000))
                return json(["signedAppTransactionInfo": .string(try api.authority.sign(payload))])
            }
        }
    }

}

extension MockServerAPIState {
    /// An app transaction payload as Apple signs it (`receiptType` and, since 2025, `environment`).
    public static func appTransaction(
        bundleID: String, appAppleID: Int64?, environment: AppStoreEnvironment, appTransactionID: String?,
        originalApplicationVersion: String, originalPurchaseDate: Date, signedDate: Date = Date()
    ) -> JSONValue {
        func ms(_ date: Date) -> JSONValue { .number((date.timeIntervalSince1970 * 1000).rounded()) }
        let name = environment == .production ? "Production" : "Sandbox"
        var object: [String: JSONValue] = [
            "receiptType": .string(name), "environment": .string(name), "bundleId": .string(bundleID), "applicationVersion": .string("42"),
            "originalApplicationVersion": .string(originalApplicationVersion), "originalPurchaseDate": ms(originalPurchaseDate),
            "receiptCreationDate": ms(signedDate), "signedDate": ms(signedDate), "originalPlatform": .string("iOS"),
            "deviceVerification": .string("dGVzdC1kZXZpY2UtdmVyaWZpY2F0aW9u"), "deviceVerificationNonce": .string(UUID().uuidString.lowercased()),
        ]
        if let appAppleID { object["appAppleId"] = .number(Double(appAppleID)) }
        if let appTransactionID { object["appTransactionId"] = .string(appTransactionID) }
        return .object(object)
    }
}

extension MockNotificationCenter {
    /// A parent or guardian withdraws consent for a child's use of the app: `RESCIND_CONSENT`
    /// (2025-11), whose `appData` carries the signed app transaction and no purchase.
    /// - Returns: the notification's UUID.
    @discardableResult
    public func rescindConsent(
        appTransaction: JSONValue, bundleID: String, environment: AppStoreEnvironment, delivery: Delivery = Delivery()
    ) throws -> String {
        try notify(
            type: NotificationTypes.rescindConsent, transaction: nil, appTransaction: appTransaction, bundleID: bundleID,
            environment: environment, delivery: delivery)
    }
}
