import ReceiptCore

extension ValidationRecord {
    /// The environment a record's purchases, subscriptions and events are filed under: Apple's
    /// answer's, else the job's, else `unknown`. One rule, because rows of one record must meet
    /// again by it (a subscription's purchases, the customer view's look-ups).
    var ledgerEnvironment: String { environment ?? envelope.payload.environment ?? "unknown" }
}
