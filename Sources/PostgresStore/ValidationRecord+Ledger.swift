import ReceiptCore

extension ValidationRecord {
    /// The environment a record's purchases, subscriptions and events are filed under: Apple's
    /// answer's, else the job's, else `unknown`. One rule, because rows of one record must meet
    /// again by it (a subscription's purchases, the customer view's look-ups).
    var ledgerEnvironment: String { environment ?? envelope.payload.environment ?? "unknown" }
}

extension ValidationRecord {
    /// What the receipts row keeps as the receipt: the app receipt or signed transaction validated,
    /// the receipt a re-poll sent, or the notification applied.
    var receiptRowData: String {
        switch envelope.payload {
        case .receipt, .transaction, .importItem: envelope.payload.purchase?.receiptData ?? ""
        case .repoll(let job): job.latestReceipt
        case .notification(let job): job.body
        case .delivery(let delivery): delivery.body
        }
    }
}
