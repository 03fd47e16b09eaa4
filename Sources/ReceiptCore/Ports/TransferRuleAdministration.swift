import Foundation

/// Why an app's transfer rule cannot be changed.
public enum TransferRuleAdminError: Error, Sendable, Equatable {
    case unknownApp
}

/// The admin API's way to change an app's ``TransferRule`` (audited in the same transaction).
public protocol TransferRuleAdministration: Sendable {
    /// The app's rule.
    /// - Throws: ``TransferRuleAdminError/unknownApp``.
    func transferRule(appID: UUID) async throws -> TransferRule
    /// Sets the app's rule; it applies to the transactions presented from then on.
    /// - Throws: ``TransferRuleAdminError/unknownApp``.
    func setTransferRule(_ rule: TransferRule, appID: UUID, audit: AuditAction) async throws
}
