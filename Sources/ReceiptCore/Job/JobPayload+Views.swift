import Foundation

// What the dead letters, the dashboard and the logs show of a payload, whichever its case. Each is
// an exhaustive switch, so a new case has to say what it shows.
extension JobPayload {
    /// The bundle id the job concerns, where the door or the scheduler knew it.
    public var bundleID: String? {
        switch self {
        case .receipt(let job): job.bundleID
        case .transaction(let job): job.bundleID
        case .importItem(let item): item.purchase.bundleID
        case .repoll(let job): job.bundleID
        case .notification(let job): job.bundleID
        case .consumption(let job): job.bundleID
        case .delivery: nil
        }
    }

    /// The environment the job concerns (`production`/`sandbox`), where known.
    public var environment: String? {
        switch self {
        case .receipt(let job): job.environment
        case .transaction(let job): job.environment
        case .importItem(let item): item.purchase.environment
        case .repoll(let job): job.environment
        case .notification(let job): job.environment
        case .consumption(let job): job.environment
        case .delivery: nil
        }
    }

    /// The style the door (or the stored receipt of a re-poll) decoded; nil for what is no receipt.
    public var style: ReceiptStyle? {
        switch self {
        case .receipt, .transaction, .importItem: purchase?.style
        case .repoll(let job): job.style
        case .notification, .delivery, .consumption: nil
        }
    }

    /// The user the job concerns, where the client named one.
    public var userIdentifier: String? {
        switch self {
        case .receipt, .transaction, .importItem: purchase?.submission.userIdentifier
        case .repoll(let job): job.userIdentifier
        case .notification, .delivery, .consumption: nil
        }
    }

    /// The bytes the job carries for Apple or the endpoint: the receipt or signed transaction
    /// validated, the receipt a re-poll re-sends, the notification applied, the event delivered.
    /// Secret: never logged (``redacting(_:)`` replaces them).
    public var carriedText: String {
        switch self {
        case .receipt, .transaction, .importItem: purchase?.receiptData ?? ""
        case .repoll(let job): job.latestReceipt
        case .notification(let job): job.body
        case .delivery(let delivery): delivery.body
        case .consumption: ""
        }
    }

    /// The webhook delivery this job makes, if it is one.
    public var delivery: WebhookDelivery? {
        guard case .delivery(let delivery) = self else { return nil }
        return delivery
    }

    /// The payload with its secret bytes (the receipt, the signed transaction or notification, the
    /// event's body) replaced by what `redact` makes of them.
    public func redacting(_ redact: (String) -> String) -> JobPayload {
        switch self {
        case .receipt, .transaction:
            return purchase?.redacting(redact).payload ?? self
        case .importItem(var item):
            item.purchase = item.purchase.redacting(redact)
            return .importItem(item)
        case .repoll(var job):
            job.latestReceipt = redact(job.latestReceipt)
            return .repoll(job)
        case .notification(var job):
            job.body = redact(job.body)
            return .notification(job)
        case .delivery(var delivery):
            delivery.body = redact(delivery.body)
            return .delivery(delivery)
        case .consumption:
            return self
        }
    }
}

extension PurchaseJob {
    /// The purchase with its receipt or signed transaction replaced by what `redact` makes of it.
    public func redacting(_ redact: (String) -> String) -> PurchaseJob {
        switch self {
        case .receipt(var job):
            job.receipt = redact(job.receipt)
            return .receipt(job)
        case .transaction(var job):
            job.signedTransaction = job.signedTransaction.map(redact)
            return .transaction(job)
        }
    }

    /// The style the door decoded (a receipt's; nil for a transaction).
    public var style: ReceiptStyle? {
        guard case .receipt(let job) = self else { return nil }
        return job.style
    }
}
