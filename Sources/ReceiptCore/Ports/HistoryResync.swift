import Foundation

/// An operator's request to read a customer's history again from its start (issue 42, item 2):
/// the stored revision is not used, and the read's end replaces it.
public struct ResyncRequest: Sendable, Equatable {
    public var appID: UUID
    /// The customer: an original transaction id of the app (Apple's decimal id).
    public var originalTransactionID: String
    /// The environment to ask first (nil: production, then the sandbox).
    public var environment: AppStoreEnvironment?
    /// The user the validation's receipt row is filed for, when the operator knows it.
    public var userIdentifier: String?

    /// Creates a request.
    public init(appID: UUID, originalTransactionID: String, environment: AppStoreEnvironment? = nil, userIdentifier: String? = nil) {
        self.appID = appID
        self.originalTransactionID = originalTransactionID
        self.environment = environment
        self.userIdentifier = userIdentifier
    }

    /// Why the request's fields are not usable: the field and the reason, for a 422.
    public struct Problem: Error, Sendable, Equatable {
        public var field: String
        public var reason: String
    }

    /// Checks the fields an operator typed.
    /// - Throws: ``Problem`` naming the first bad field.
    public static func validated(
        appID: UUID, originalTransactionID: String, environment: String?, userIdentifier: String?
    ) throws(Problem) -> ResyncRequest {
        guard !originalTransactionID.isEmpty, originalTransactionID.utf8.count <= 64,
            originalTransactionID.utf8.allSatisfy({ (48...57).contains($0) })
        else { throw Problem(field: "original_transaction_id", reason: "must be Apple's decimal transaction id") }
        var parsed: AppStoreEnvironment?
        if let environment, !environment.isEmpty {
            guard let value = AppStoreEnvironment(rawValue: environment.lowercased()) else {
                throw Problem(field: "environment", reason: "must be production or sandbox")
            }
            parsed = value
        }
        if let userIdentifier, userIdentifier.utf8.count > 256 {
            throw Problem(field: "user_identifier", reason: "must be at most 256 bytes")
        }
        return ResyncRequest(
            appID: appID, originalTransactionID: originalTransactionID, environment: parsed,
            userIdentifier: userIdentifier?.isEmpty == true ? nil : userIdentifier)
    }
}

/// Why a resync was not queued.
public enum ResyncFailure: Error, Sendable, Equatable {
    /// No app has this id.
    case unknownApp
    /// The app cannot use the App Store Server API (no In-App Purchase key): nothing to resync with.
    case noServerAPIKey
    /// Redis or Postgres did not answer: nothing was queued.
    case unavailable
}

/// Queues resyncs as normal validation jobs through the one queue (origin ``JobOrigin/resync``),
/// which the worker's planner reads from the first history page.
public protocol HistoryResync: Sendable {
    /// Queues the resync; returns the job's id (also its receipt's).
    func resync(_ request: ResyncRequest) async throws(ResyncFailure) -> UUID
}
