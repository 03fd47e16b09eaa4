import Foundation

/// The apps' refund-defence policies, for the admin API (the CLI goes through `Admin`).
public protocol ConsumptionPolicies: Sendable {
    /// The app's policy; nil when there is no such app.
    func policy(appID: UUID) async throws -> ConsumptionPolicy?
    /// Sets the app's policy, with its audit line in the same transaction; false when there is no such app.
    func setPolicy(_ policy: ConsumptionPolicy, appID: UUID, audit: AuditAction) async throws -> Bool
}
