import Foundation

/// A subscription whose re-poll is due, as the scheduler claims it: what a `repoll` job needs.
public struct DueSubscription: Sendable, Equatable, CustomStringConvertible {
    public var appID: UUID
    public var environment: String
    public var originalTransactionID: String
    /// The poll counter before this poll: with the key, it names the job.
    public var pollSequence: Int
    /// The stored receipt whose latest receipt is re-sent.
    public var receiptID: UUID
    /// That latest receipt, base64. Secret: never logged.
    public var receipt: String
    public var style: ReceiptStyle?
    public var bundleID: String?
    public var userIdentifier: String?
    /// How the stored receipt came in (``RepollJob/source``): a StoreKit 2 transaction's
    /// subscription is re-polled with the Server API whatever the app's backend for receipts.
    public var source: JobSource

    /// Creates a due subscription.
    public init(
        appID: UUID, environment: String, originalTransactionID: String, pollSequence: Int, receiptID: UUID, receipt: String,
        style: ReceiptStyle? = nil, bundleID: String? = nil, userIdentifier: String? = nil, source: JobSource = .receipt
    ) {
        self.source = source
        self.appID = appID
        self.environment = environment
        self.originalTransactionID = originalTransactionID
        self.pollSequence = pollSequence
        self.receiptID = receiptID
        self.receipt = receipt
        self.style = style
        self.bundleID = bundleID
        self.userIdentifier = userIdentifier
    }

    /// Without the receipt or the user, so a due subscription interpolated into a log line leaks nothing.
    public var description: String {
        "DueSubscription(app: \(appID), environment: \(environment), original_transaction_id: \(originalTransactionID), poll_seq: \(pollSequence))"
    }

    /// The `repoll` job for this poll.
    public func job(id: UUID, at date: Date) -> JobEnvelope {
        JobEnvelope(
            id: id, appID: appID, enqueuedAt: date, origin: .scheduler,
            payload: .repoll(
                RepollJob(
                    target: RepollTarget(originalTransactionID: originalTransactionID, receiptID: receiptID, pollSequence: pollSequence),
                    latestReceipt: receipt, style: style, bundleID: bundleID, environment: environment, userIdentifier: userIdentifier,
                    source: source)))
    }
}
