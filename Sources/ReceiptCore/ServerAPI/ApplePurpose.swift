import Foundation

/// Why receiptq calls the App Store Server API: what an app's calls are spent on, and which work
/// gives way first when the app's hourly budget runs short.
///
/// Apple's limits are per app and endpoint and enforced per hour, so a backfill or a re-poll wave
/// spends the same budget a customer's purchase needs. Work that can wait (``Priority/deferrable``)
/// may spend only a share of each hour's budget; the rest is kept for the purchases customers are
/// waiting on and for support.
public enum ApplePurpose: String, Sendable, CaseIterable, Codable {
    /// A purchase a device or backend posted (a receipt, a signed transaction, an id).
    case validation
    /// A re-poll of a subscription before its expiry.
    case repoll
    /// An item of a bulk import.
    case `import`
    /// An operator's support action (order look-up, refund history, extension, test notification).
    case support
    /// The scheduler's Get Notification History sweep for notifications Apple could not deliver.
    case historySweep = "history_sweep"
    /// An answer to Apple's `CONSUMPTION_REQUEST` (Send Consumption Information), due within 12 hours.
    case refundDefence = "refund_defence"

    /// Whether the work waits for the next hour when the budget runs short.
    public enum Priority: String, Sendable {
        /// Someone is waiting: may spend the whole hourly budget.
        case urgent
        /// Nobody is waiting on this call: may spend only ``HourlyCallBudget/deferrableShare``.
        case deferrable
    }

    /// The purpose's place in the hourly budget.
    public var priority: Priority {
        switch self {
        case .validation, .support, .refundDefence: .urgent
        case .repoll, .import, .historySweep: .deferrable
        }
    }
}

/// How much of an app's hourly Server API budget each priority may spend.
///
/// Apple states its limits per second but enforces them per hour: an app may call an endpoint
/// `ratePerSecond × 3600` times an hour. The token bucket spreads the calls over the seconds; this
/// budget decides, when an hour's calls run short, whose wait it is: deferrable work stops at its
/// share and waits for the next hour (in the retry set: delayed, never lost), urgent work goes on
/// to the whole budget.
public struct HourlyCallBudget: Sendable, Equatable {
    /// The share of each endpoint's hourly budget deferrable work may spend (0…1).
    public var deferrableShare: Double

    /// Creates a budget.
    public init(deferrableShare: Double = 0.8) {
        self.deferrableShare = min(1, max(0, deferrableShare))
    }

    /// The calls `purpose` may make to `endpoint` of one app in one hour.
    public func limit(for purpose: ApplePurpose, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment) -> Int {
        let hour = endpoint.ratePerSecond(in: environment) * 3600
        switch purpose.priority {
        case .urgent: return Int(hour)
        case .deferrable: return Int((hour * deferrableShare).rounded(.down))
        }
    }

    /// The start of the hour after `date` (UTC hours: every process agrees on the window).
    public static func nextHour(after date: Date) -> Date {
        Date(timeIntervalSince1970: (floor(date.timeIntervalSince1970 / 3600) + 1) * 3600)
    }
}
