import Foundation

/// A kind of data receiptq keeps for a while and then drops (issue 44). Purchases, subscriptions
/// and the ledger are no kind: retention never drops them. (Import runs' progress is kept in Redis
/// by a time to live, `RETENTION_IMPORT_RUNS_DAYS`, not by this step.)
public enum RetentionKind: String, Sendable, CaseIterable, Hashable {
    /// `validation_attempts`: one row per call to Apple.
    case appleCallAttempts = "apple_call_attempts"
    /// `notifications`: Apple's notifications as received (their bodies).
    case notifications
    /// `events`: the outbox, once none of its webhook deliveries is still open.
    case events
    /// `webhook_deliveries` that are settled (delivered or dead).
    case webhookDeliveries = "webhook_deliveries"
    /// `audit_log`: operators' actions.
    case auditLog = "audit_log"
    /// The dead letters in Redis (by the time each job died).
    case deadLetters = "dead_letters"
    /// Receipts a newer receipt of the same user has superseded: deleted when nothing refers to
    /// them any more (no purchase first recorded by them, no call or notification kept); else
    /// their texts (`receipt_data`, `latest_receipt`) are emptied, while the row, status and
    /// purchases stay.
    case supersededReceipts = "superseded_receipts"

    /// The documented default, in days (`RETENTION_<KIND>_DAYS` when unset; 0 would keep forever).
    public var defaultDays: Int {
        switch self {
        case .appleCallAttempts: 90
        case .notifications: 180
        case .events: 30
        case .webhookDeliveries: 30
        case .auditLog: 730
        case .deadLetters: 180
        case .supersededReceipts: 90
        }
    }

    /// Whether an app may keep its own value: the dead letters are one Redis set for every app.
    public var isPerApp: Bool { self != .deadLetters }
}

/// How long each kind of data is kept: the deployment's days per kind, which an app's override
/// replaces. Pure: the scheduler's retention step asks it for each kind's cutoff.
public struct RetentionPolicy: Sendable, Equatable {
    /// The most days a setting may say (a hundred years); 0 is "forever".
    public static let maxDays = 36_500

    /// The deployment's days per kind (a kind left out has its default).
    public private(set) var days: [RetentionKind: Int]

    /// The seconds of a retention day: 86,400, fewer only for a bench or a test that compresses
    /// days (`RETENTION_DAY_SECONDS`), so a month of retention passes in minutes.
    public private(set) var daySeconds: Int

    /// The width of a time partition: a week of retention days (a row outlives its days by at most
    /// that before its partition is dropped whole; the batched deletes take it on time meanwhile).
    public var partitionSeconds: Int { 7 * daySeconds }

    /// Creates a policy; days outside `0...maxDays` are clamped, a day at least a second.
    public init(days: [RetentionKind: Int] = [:], daySeconds: Int = 86_400) {
        self.days = days.mapValues { Self.clamped($0) }
        self.daySeconds = max(1, daySeconds)
    }

    /// The days `kind` is kept for, an app's override first (0: forever).
    public func days(_ kind: RetentionKind, override: Int? = nil) -> Int {
        if kind.isPerApp, let override { return Self.clamped(override) }
        return days[kind] ?? kind.defaultDays
    }

    /// The instant before which `kind`'s rows are expired at `now`, or nil when they are kept forever.
    public func cutoff(_ kind: RetentionKind, override: Int? = nil, now: Date) -> Date? {
        let kept = days(kind, override: override)
        return kept == 0 ? nil : now.addingTimeInterval(-Double(kept * daySeconds))
    }

    /// Whether `days` is a value an operator may set.
    public static func isValid(days: Int) -> Bool { (0...maxDays).contains(days) }

    private static func clamped(_ days: Int) -> Int { min(max(days, 0), maxDays) }
}

/// One app's own retention of one kind.
public struct RetentionOverride: Sendable, Equatable {
    public var appID: UUID
    public var kind: RetentionKind
    /// Days kept (0: forever).
    public var days: Int

    /// Creates an override.
    public init(appID: UUID, kind: RetentionKind, days: Int) {
        self.appID = appID
        self.kind = kind
        self.days = days
    }
}
