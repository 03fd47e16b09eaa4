import Foundation

/// Sends Send Consumption Information v2 for an app (its In-App Purchase key, the shared rate-limit
/// bucket with the purpose `refund_defence`); asynchronous, like the verifier: the completion runs
/// on the client's thread and must not block.
public protocol ConsumptionSender: Sendable {
    /// Sends `body` about `transactionID` in `environment`, then calls `completion` with Apple's word.
    func send(
        _ body: ConsumptionInformation, transactionID: String, app: AppRecord, environment: AppStoreEnvironment,
        completion: @escaping @Sendable (ConsumptionReport) -> Void)
}
