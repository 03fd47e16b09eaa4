import Foundation

/// The revenue figures an app's rollup holds (issue 43): per day and currency, and the current
/// levels the metrics show.
public protocol RevenueFigures: Sendable {
    /// Every day of `from...to` (`YYYY-MM-DD`, UTC) for `appID`, in day then currency order; nil
    /// when no such app exists.
    func revenue(appID: UUID, from: String, to: String) async throws -> [RevenueDay]?
    /// Each app's (bundle id) active subscriptions and MRR per currency today.
    func currentLevels(at now: Date) async throws -> [RevenueLevel]
}

/// One app's subscriptions in one currency now.
public struct RevenueLevel: Sendable, Equatable {
    /// The app's bundle id.
    public var app: String
    public var currency: String
    public var activeSubscriptions: Int64
    public var mrrMilli: Int64

    /// Creates a level.
    public init(app: String, currency: String, activeSubscriptions: Int64, mrrMilli: Int64) {
        self.app = app
        self.currency = currency
        self.activeSubscriptions = activeSubscriptions
        self.mrrMilli = mrrMilli
    }
}
