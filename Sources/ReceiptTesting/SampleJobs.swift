import Foundation
import ReceiptCore

extension JobPayload {
    /// A payload of `kind` with placeholder contents, for tests about queues, sets and kinds rather
    /// than about what a job holds.
    public static func sample(
        _ kind: JobKind, receipt: String = "MII", bundleID: String? = nil, environment: String? = nil, userIdentifier: String? = nil,
        target: RepollTarget? = nil
    ) -> JobPayload {
        switch kind {
        case .validate:
            return .receipt(
                ReceiptJob(receipt: receipt, bundleID: bundleID, environment: environment, submission: Submission(userIdentifier: userIdentifier)))
        case .repoll:
            return .repoll(
                RepollJob(
                    target: target ?? RepollTarget(originalTransactionID: "1000000000", receiptID: UUID(), pollSequence: 0), latestReceipt: receipt,
                    bundleID: bundleID, environment: environment, userIdentifier: userIdentifier))
        case .notification:
            return .notification(NotificationJob(notificationID: UUID().uuidString, body: receipt, bundleID: bundleID, environment: environment))
        case .webhook:
            return .delivery(
                WebhookDelivery(
                    target: WebhookTarget(deliveryID: 1, endpointID: UUID(), eventID: UUID(), eventType: "purchase.created"), body: receipt))
        }
    }
}

extension JobPayload {
    /// The receipt job, when the payload is one; setting it replaces the payload (tests that change
    /// one field of a sample).
    public var receiptJob: ReceiptJob? {
        get {
            guard case .receipt(let job) = self else { return nil }
            return job
        }
        set {
            if let newValue { self = .receipt(newValue) }
        }
    }

    /// The re-poll, when the payload is one.
    public var repollJob: RepollJob? {
        guard case .repoll(let job) = self else { return nil }
        return job
    }
}

extension ValidationRequest {
    /// The shared secret of a `verifyReceipt` request (nil for the Server API), for tests that
    /// check which secret a job was sent with.
    public var sharedSecret: String? {
        guard case .verifyReceipt(_, let secret, _) = self else { return nil }
        return secret
    }
}
