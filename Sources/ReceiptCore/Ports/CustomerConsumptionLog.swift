import Foundation

/// What the app's backend posts about a user for the refund defence (`PUT
/// /client/users/{user}/consumption`): consent, delivery, use. The last statement replaces the
/// earlier one; the worker reads it when Apple's consumption request comes.
public protocol CustomerConsumptionLog: Sendable {
    /// Replaces what the app said about `userIdentifier`.
    func record(_ statement: CustomerConsumption, appID: UUID, userIdentifier: String) async throws
}
