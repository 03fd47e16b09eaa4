import Foundation

/// One answer Apple took (Send Consumption Information v2 answered 2xx): recorded once per
/// request, with the facts it was computed from, audited, shown in the customer view and stated
/// as a `refund.consumption_sent` event.
public struct ConsumptionAnswer: Sendable, Equatable {
    public var appID: UUID
    /// The answer job that sent it (the request's claim).
    public var jobID: UUID
    /// The `CONSUMPTION_REQUEST`'s `notificationUUID`.
    public var notificationID: String
    public var transactionID: String
    public var environment: String?
    /// The purchase's user, when receiptq knows it.
    public var userIdentifier: String?
    public var policy: ConsumptionPolicy
    /// What was sent.
    public var body: ConsumptionInformation
    /// The facts behind it, as the audit trail and the customer view show them.
    public var spendBand: LifetimeSpendBand
    public var refundedPurchases: Int
    public var playTimeSeconds: Int64?
    public var sentAt: Date

    /// Creates an answer from the request's facts and the body sent.
    public init(
        appID: UUID, jobID: UUID, job: ConsumptionJob, facts: ConsumptionFacts, body: ConsumptionInformation, sentAt: Date
    ) {
        self.appID = appID
        self.jobID = jobID
        self.notificationID = job.notificationID
        self.transactionID = job.transactionID
        self.environment = job.environment
        self.userIdentifier = facts.userIdentifier
        self.policy = facts.policy
        self.body = body
        self.spendBand = facts.spendBand
        self.refundedPurchases = facts.refundedPurchases
        self.playTimeSeconds = facts.customer?.playTimeSeconds
        self.sentAt = sentAt
    }

    /// The answer's JSON: the event's `data`, the audit line's detail, the customer view's row.
    public var json: JSONValue {
        var members: [String: JSONValue] = [
            "notification_uuid": .string(notificationID), "transaction_id": .string(transactionID), "policy": .string(policy.rawValue),
            "sent": body.json, "lifetime_spend_band": .string(spendBand.rawValue), "refunded_purchases": .number(Double(refundedPurchases)),
            "sent_at": .string(ISO8601DateFormatter().string(from: sentAt)),
        ]
        if let playTimeSeconds { members["play_time_seconds"] = .number(Double(playTimeSeconds)) }
        if let userIdentifier { members["user_identifier"] = .string(userIdentifier) }
        return .object(members)
    }

    /// The `refund.consumption_sent` event, stated once per request.
    public func event(id: UUID) -> NewEvent {
        NewEvent(
            id: id, type: .refundConsumptionSent, appID: appID, environment: environment, userIdentifier: userIdentifier,
            subject: "purchase:\(transactionID)", originalTransactionID: nil, transactionID: transactionID, receiptID: nil,
            occurredAt: sentAt, data: json.encodedText, dedupeKey: "consumption:\(notificationID)")
    }
}
