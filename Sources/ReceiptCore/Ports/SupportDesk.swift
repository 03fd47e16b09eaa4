import Foundation

/// The App Store Server API's support endpoints for one app, as the admin API, the dashboard and
/// the CLI use them: each call rate-limited by Apple's per-endpoint limit, its JWS checked, and
/// its consequences kept (purchases queued as validation jobs, mass extensions stored). Auditing
/// is the caller's: the line is written before the action runs.
///
/// Every method throws ``SupportFailure`` (and ``SupportInputError`` is raised before, by the
/// request types); the store behind it may also throw its own errors (unavailable).
public protocol SupportDesk: Sendable {
    /// Look Up Order ID: the customer's purchases, each queued as a validation job for `userIdentifier`.
    func lookUpOrder(appID: UUID, orderID: String, userIdentifier: String?, environment: AppStoreEnvironment) async throws -> OrderLookupResult
    /// Get Refund History (every page) of the customer `transactionID` belongs to; refunds of
    /// stored purchases receiptq did not know are queued as validation jobs.
    func refundHistory(appID: UUID, transactionID: String, environment: AppStoreEnvironment) async throws -> RefundHistoryResult
    /// Extend a Subscription Renewal Date.
    func extendRenewal(appID: UUID, _ request: RenewalExtension, environment: AppStoreEnvironment) async throws -> RenewalExtensionResult
    /// Extend Subscription Renewal Dates for All Active Subscribers; the request is stored.
    func massExtend(
        appID: UUID, _ request: MassRenewalExtension, environment: AppStoreEnvironment, requestedBy: String
    ) async throws -> MassExtensionRecord
    /// Asks Apple how a mass extension is going and stores the answer.
    func refreshMassExtension(appID: UUID, requestIdentifier: UUID) async throws -> MassExtensionRecord?
    /// The app's mass extensions as stored, newest first.
    func massExtensions(appID: UUID, limit: Int) async throws -> [MassExtensionRecord]
    /// Set App Account Token on an original transaction.
    func setAppAccountToken(appID: UUID, originalTransactionID: String, token: UUID, environment: AppStoreEnvironment) async throws
    /// Request a Test Notification: Apple's `testNotificationToken`.
    func requestTestNotification(appID: UUID, environment: AppStoreEnvironment) async throws -> String
    /// Get Test Notification Status.
    func testNotificationStatus(appID: UUID, token: String, environment: AppStoreEnvironment) async throws -> TestNotificationStatus
}

/// Where mass extensions are kept (Postgres, `mass_extensions`).
public protocol MassExtensionLog: Sendable {
    /// Stores a new request (the same request identifier again changes nothing).
    func record(_ extension: MassExtensionRecord) async throws
    /// Stores Apple's latest word on a request, checked at `at`.
    func update(appID: UUID, requestIdentifier: UUID, progress: MassExtensionProgress, at: Date) async throws
    /// One request.
    func find(appID: UUID, requestIdentifier: UUID) async throws -> MassExtensionRecord?
    /// The app's requests, newest first.
    func list(appID: UUID, limit: Int) async throws -> [MassExtensionRecord]
}
