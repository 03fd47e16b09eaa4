import Foundation

/// The worker's side of the refund defence in Postgres: what is known when a consumption request
/// comes, and the answers Apple took (blocking, like ``ReceiptStore``; one instance per thread).
public protocol RefundDefenceLog: AnyObject {
    /// The facts about `transactionID` of `appID`: the app's policy, whether `notificationID` was
    /// answered, the purchase's user, the user's lifetime spend and refunds, and what the app
    /// posted about the user.
    func consumptionFacts(appID: UUID, environment: String?, transactionID: String, notificationID: String) throws -> ConsumptionFacts
    /// Claims the request for `job` before it sends: true when `job` holds the claim (taken now,
    /// or its own from an earlier attempt), false when another job holds it (another copy of the
    /// request sends, or sent) — so copies of one request send once.
    func claimConsumption(appID: UUID, notificationID: String, transactionID: String, job: UUID) throws -> Bool
    /// Records the answers in one transaction, idempotently (one per request, on its claim): each
    /// with its audit line and its `refund.consumption_sent` event.
    /// - Throws: when the database is unreachable or refuses: nothing is known to be recorded.
    func record(_ answers: [ConsumptionAnswer]) throws
}
