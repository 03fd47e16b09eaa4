import Foundation

/// What the worker writes to Postgres after Apple answered.
public struct ValidationRecord: Sendable, Equatable {
    public var envelope: JobEnvelope
    public var status: ValidationStatus
    /// `production`/`sandbox` from Apple's answer.
    public var environment: String?
    public var appleStatus: Int?
    public var purchases: [InAppPurchase]
    public var latestReceipt: String?
    /// This attempt's calls to Apple.
    public var calls: [AppleCall]
    /// The time its calls are filed under (`validation_attempts.created_at`, the table's partition
    /// key): the job's enqueue time, which the envelope carries unchanged through retries and a
    /// replay after a crash, so a replayed job meets its own rows' key and writes its calls once.
    /// The time a call was made would not do: a replay calls Apple again, later. All attempts of
    /// a job share one time, so they expire, and sit in a partition, together.
    public var callsFiledAt: Date { envelope.enqueuedAt }
    public var validatedAt: Date
    /// The same instant on the clock subscriptions' times are planned on (``JobPlanner/observedAt``):
    /// what the subscription rows say of when they were polled (`last_polled_at`) or notified
    /// (`notified_at`), and the app's notification activity, all of which the scheduler compares
    /// with its re-poll clock. `validatedAt` unless the planner has a clock of its own for them.
    public var plannedAt: Date
    /// Which Apple API produced the result (nil: none was asked, as for fraud or a failed job).
    public var validatedBy: ValidationBackend?
    /// Storing this result also records that its `auto` app moved to the Server API.
    public var switchesApp: Bool = false
    /// The auto-renewable subscriptions Apple's answer shows, each with its next re-poll.
    public var subscriptions: [PlannedSubscription]
    /// For a failed `repoll` job: when to try the subscription again (the dead letter keeps the job).
    public var retryPollAt: Date?
    /// Why the result is not valid (`apple_21002`, …): nil for a valid result, whatever earlier
    /// attempts failed with (the attempts table keeps that history). Nil for other statuses means
    /// the envelope's last error code.
    public var errorCode: FailureCode?
    /// For a `notification` job: the notification (its effect is in `purchases` and `subscriptions`).
    public var notification: AppleNotification?
    /// The stored receipt a notification's changes are filed under, when the store found one that
    /// already holds its subscription or purchase (nil: the notification's own row).
    public var filedUnder: UUID?
    /// The user the ledger rows are filed for: the job's, or for a notification the user of the
    /// stored receipt that holds its subscription (set by the store).
    public var userIdentifier: String?
    /// For a `notification` job: the transaction it states.
    public var notificationTransactionID: String?
    /// Where this validation's Get Transaction History read ended, stored for the next read (nil:
    /// no history was read).
    public var historyCursor: HistoryCursor?
    /// The job this one becomes once stored (a `CONSUMPTION_REQUEST`'s answer): the settlement
    /// moves the stored job's bytes to it in one step, so each stored request has one answer job.
    public var followUp: JobEnvelope?

    /// Creates a record.
    public init(
        envelope: JobEnvelope, status: ValidationStatus, environment: String?, appleStatus: Int?,
        purchases: [InAppPurchase], latestReceipt: String?, calls: [AppleCall], validatedAt: Date,
        subscriptions: [PlannedSubscription] = [], retryPollAt: Date? = nil, errorCode: FailureCode? = nil,
        validatedBy: ValidationBackend? = nil
    ) {
        self.validatedBy = validatedBy
        self.errorCode = errorCode
        self.envelope = envelope
        self.status = status
        self.environment = environment
        self.appleStatus = appleStatus
        self.purchases = purchases
        self.latestReceipt = latestReceipt
        self.calls = calls
        self.validatedAt = validatedAt
        self.plannedAt = validatedAt
        self.subscriptions = subscriptions
        self.retryPollAt = retryPollAt
        self.userIdentifier = envelope.payload.userIdentifier
    }
}

/// A subscription state to store, with when the scheduler should poll it next (nil: never).
public struct PlannedSubscription: Sendable, Equatable {
    public var state: SubscriptionState
    public var nextPollAt: Date?

    /// Creates a planned subscription.
    public init(state: SubscriptionState, nextPollAt: Date?) {
        self.state = state
        self.nextPollAt = nextPollAt
    }
}

extension ValidationRecord {
    /// The error code the receipt row keeps: none once valid (an earlier `21008` must not linger on
    /// a valid row), else this result's own code, else the envelope's last failure.
    public var storedErrorCode: String? {
        switch status {
        case .valid: nil
        case .fraud: envelope.payload.purchase?.fraudReason
        default: (errorCode ?? envelope.errorCode)?.rawValue
        }
    }

    /// The subscription this record re-polled, if it is a re-poll.
    public var repollTarget: RepollTarget? {
        guard case .repoll(let job) = envelope.payload else { return nil }
        return job.target
    }

    /// Whether this is a re-poll of a subscription (no receipt row of its own).
    public var isRepoll: Bool { repollTarget != nil }

    /// Whether this applies an App Store Server Notification (nobody waits for its resource).
    public var isNotification: Bool { notification != nil }

    /// The stored receipt this record's purchases and calls are filed under: its own, for a re-poll
    /// the receipt it re-sent, for a notification the receipt that already holds its subscription.
    public var receiptID: UUID { filedUnder ?? repollTarget?.receiptID ?? envelope.id }
}
