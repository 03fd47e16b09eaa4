import Foundation

/// The App Store Server API's endpoints, by the rate limit Apple publishes for each.
public enum ServerAPIEndpoint: String, Sendable, CaseIterable {
    case transactionInfo = "transaction_info"
    case transactionHistory = "transaction_history"
    case subscriptionStatuses = "subscription_statuses"
    case notificationHistory = "notification_history"
    case lookUpOrderID = "look_up_order_id"
    case refundHistory = "refund_history"
    case extendRenewalDate = "extend_renewal_date"
    case setAppAccountToken = "set_app_account_token"
    case massExtendRenewalDate = "mass_extend_renewal_date"
    case massExtensionStatus = "mass_extension_status"
    case testNotification = "test_notification"
    case testNotificationStatus = "test_notification_status"
    case sendConsumptionInformation = "send_consumption_information"

    /// Apple's per-app limit in requests per second (enforced per hour): 50 for transaction info,
    /// history, statuses, notification history and consumption information, 20 for renewal extensions and app account
    /// tokens, 10 for order look-up and refund history, 1 for mass extensions and test
    /// notifications (and their statuses); the sandbox allows a tenth of production.
    public func ratePerSecond(in environment: AppStoreEnvironment) -> Double {
        let production: Double =
            switch self {
            case .transactionInfo, .transactionHistory, .subscriptionStatuses, .notificationHistory, .sendConsumptionInformation: 50
            case .lookUpOrderID, .refundHistory: 10
            case .extendRenewalDate, .setAppAccountToken: 20
            case .massExtendRenewalDate, .massExtensionStatus, .testNotification, .testNotificationStatus: 1
            }
        return environment == .sandbox ? production / 10 : production
    }
}

/// What the bucket gave one call.
public enum ServerAPISlot: Sendable, Equatable {
    /// Go now.
    case now
    /// A token that will be there at this time is this call's: go then, without asking again.
    case booked(Date)
    /// Nothing within the booking window (or the app is paused): ask again at this time.
    case later(Date)
}

/// A token bucket per app, environment and endpoint, shared by every worker process, so the
/// deployment as a whole stays under Apple's limits; and a pause for the whole app after a `429`.
///
/// Blocking, like the queue: one instance per thread.
public protocol ServerAPIRateLimiter: AnyObject {
    /// Takes one call from the bucket, or books one of the tokens of the next `bookingAhead`
    /// seconds: a call over the limit then waits once, for its own slot, instead of asking again
    /// and again with every other waiting call (which cost ~100 Redis round trips per call when
    /// an app ran far over its limit).
    ///
    /// A granted call (now or booked) is counted for `purpose` in the app's hour, and a purpose
    /// whose share of the hour (``HourlyCallBudget``) is spent gets `.later` at the next hour.
    /// - Parameters:
    ///   - app: the app's bundle id (Apple's limits are per app).
    func reserve(
        app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, purpose: ApplePurpose, now: Date,
        bookingAhead: TimeInterval
    ) throws -> ServerAPISlot
    /// Apple answered `429` for `app`: every endpoint of it waits until `until` (a later pause wins).
    func pause(app: String, environment: AppStoreEnvironment, until: Date, now: Date) throws
}

extension ServerAPIRateLimiter {
    /// Takes one call from the bucket, booking nothing ahead.
    /// - Returns: nil when the call may go now; otherwise the earliest time to ask again.
    public func reserve(
        app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, purpose: ApplePurpose, now: Date
    ) throws -> Date? {
        switch try reserve(app: app, endpoint: endpoint, environment: environment, purpose: purpose, now: now, bookingAhead: 0) {
        case .now: nil
        case .booked(let at), .later(let at): at
        }
    }
}
