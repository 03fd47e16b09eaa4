import Foundation
import ReceiptCore

extension MockNotificationCenter {
    /// Something happens to a purchase in the mock App Store, as it would at Apple: the ledger the
    /// Server API answers from changes, then the notification goes out.
    ///
    /// - `REFUND` / `REVOKE`: the transaction gets `revocationDate` (now) and `revocationReason`
    ///   (1 for a refund: an issue with the app; 0 for a revocation); `REFUND_REVERSED` removes them.
    /// - `DID_RENEW`: a new transaction of the subscription, for the next period of the same length.
    /// - `EXPIRED`: the latest period ends now and auto-renew is off (`expirationIntent` 1).
    /// - `DID_FAIL_TO_RENEW`: the period ends now, billing retry starts (`GRACE_PERIOD`: with 16
    ///   days of grace).
    /// - `DID_CHANGE_RENEWAL_STATUS`: `AUTO_RENEW_DISABLED` / `AUTO_RENEW_ENABLED`.
    /// - Anything else: sent about the transaction as it stands.
    /// - Returns: the notification's UUID, or nil when the transaction is unknown.
    @discardableResult
    public func event(
        type: String, subtype: String? = nil, transactionID: String, environment: AppStoreEnvironment, delivery: Delivery = Delivery()
    ) throws -> String? {
        guard var transaction = api.transaction(transactionID, in: environment) else { return nil }
        let now = (Date().timeIntervalSince1970 * 1000).rounded()
        let original = transaction["originalTransactionId"]?.stringValue ?? transactionID
        switch type {
        case "REFUND", "REVOKE":
            transaction =
                api.update(transaction: transactionID, in: environment) {
                    $0["revocationDate"] = .number(now)
                    $0["revocationReason"] = .number(type == "REFUND" ? 1 : 0)
                } ?? transaction
        case "REFUND_REVERSED":
            transaction =
                api.update(transaction: transactionID, in: environment) {
                    $0["revocationDate"] = nil
                    $0["revocationReason"] = nil
                } ?? transaction
        case "DID_RENEW":
            let latest = api.subscription(original, among: api.history(of: transactionID, in: environment) ?? [], in: environment)?.latest
            let base = latest ?? transaction
            let start = MockServerAPI.expires(base)
            let length = max(60_000, start - (base["purchaseDate"]?.stringValue.flatMap(Double.init) ?? start - 2_592_000_000))
            var renewed = base.objectValue ?? [:]
            let id = String(UInt64(Date().timeIntervalSince1970 * 1_000_000) &* 10 &+ UInt64.random(in: 0...9))
            renewed["transactionId"] = .string(id)
            renewed["webOrderLineItemId"] = .string(String(UInt64(id)! &+ 1))
            renewed["purchaseDate"] = .number(max(start, now - 1000))
            renewed["expiresDate"] = .number(max(start, now - 1000) + length)
            renewed["transactionReason"] = .string("RENEWAL")
            api.add(transactions: [.object(renewed)], environment: environment)
            api.setRenewal(["isInBillingRetryPeriod": .bool(false)], originalTransactionID: original, environment: environment)
            transaction = .object(renewed)
        case "EXPIRED", "DID_FAIL_TO_RENEW":
            // Every period of the subscription still running (a renewal already charged included) ends now.
            for running in api.history(of: transactionID, in: environment) ?? []
            where running["originalTransactionId"]?.stringValue == original && MockServerAPI.expires(running) > now {
                guard let id = running["transactionId"]?.stringValue else { continue }
                let ended = api.update(transaction: id, in: environment) { $0["expiresDate"] = .number(now - 1000) }
                if id == transactionID, let ended { transaction = ended }
            }
            if type == "EXPIRED" {
                api.setRenewal(
                    ["autoRenewStatus": .number(0), "expirationIntent": .number(1), "isInBillingRetryPeriod": .bool(false)],
                    originalTransactionID: original, environment: environment)
            } else {
                var fields: [String: JSONValue] = ["isInBillingRetryPeriod": .bool(true), "expirationIntent": .number(2)]
                if subtype == "GRACE_PERIOD" { fields["gracePeriodExpiresDate"] = .number(now + 16 * 86_400_000) }
                api.setRenewal(fields, originalTransactionID: original, environment: environment)
            }
        case "DID_CHANGE_RENEWAL_STATUS":
            api.setRenewal(
                ["autoRenewStatus": .number(subtype == "AUTO_RENEW_DISABLED" ? 0 : 1)], originalTransactionID: original, environment: environment)
        default:
            break
        }
        let bundleID = transaction["bundleId"]?.stringValue ?? ""
        guard transaction["expiresDate"] != nil else {
            return try notify(
                type: type, subtype: subtype, transaction: transaction, bundleID: bundleID, environment: environment, delivery: delivery)
        }
        let current = api.subscription(original, among: api.history(of: transactionID, in: environment) ?? [transaction], in: environment)
        return try notify(
            type: type, subtype: subtype,
            // A refund is about the refunded transaction; the rest about the subscription's latest.
            transaction: ["DID_RENEW", "REFUND", "REVOKE", "REFUND_REVERSED"].contains(type) ? transaction : current?.latest ?? transaction,
            renewal: current?.renewal, status: current?.status, bundleID: bundleID, environment: environment, delivery: delivery)
    }
}
