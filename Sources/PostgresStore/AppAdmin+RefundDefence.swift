import Foundation
import Libpq
import ReceiptCore

// The refund defence's settings: each app's policy, and what its backend posts about its users.
extension AppAdmin {
    /// Sets how the app answers Apple's consumption requests; returns whether the app exists.
    @discardableResult
    public func setConsumptionPolicy(appID: UUID, policy: ConsumptionPolicy) throws -> Bool {
        try connection.query(
            "UPDATE apps SET consumption_policy = \(policy.rawValue), updated_at = now() WHERE id = \(appID) RETURNING id"
        ).rows.count == 1
    }

    /// The app's policy (nil: no such app).
    public func consumptionPolicy(appID: UUID) throws -> ConsumptionPolicy? {
        try connection.query("SELECT consumption_policy AS policy FROM apps WHERE id = \(appID)").rows.first?.string("policy")
            .flatMap(ConsumptionPolicy.init(rawValue:))
    }

    /// Replaces what the app's backend said about `userIdentifier` (consent, delivery, use).
    public func setCustomerConsumption(_ statement: CustomerConsumption, appID: UUID, userIdentifier: String) throws {
        try CustomerConsumptionRows.write(statement, appID: appID, userIdentifier: userIdentifier, on: connection)
    }
}
