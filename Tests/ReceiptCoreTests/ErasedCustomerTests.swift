import Foundation
import ReceiptCore
import Testing

/// Which jobs an erasure drops: the app's jobs submitted for one of the customer's ids, or naming
/// one of their receipts or events; never another app's, another user's, or an anonymous one.
@Suite("Erased customer: which jobs are theirs")
struct ErasedCustomerTests {
    let app = UUID()
    let receipt = UUID()
    let event = UUID()
    var erased: ErasedCustomer {
        ErasedCustomer(
            erasureID: UUID(), appID: app, userIdentifier: "old", userIdentifiers: ["old", "new"], receiptIDs: [receipt], eventIDs: [event])
    }

    func job(_ payload: JobPayload, app: UUID? = nil, id: UUID = UUID()) -> JobEnvelope {
        JobEnvelope(id: id, appID: app ?? self.app, enqueuedAt: Date(), origin: .api, payload: payload)
    }

    func receiptJob(_ user: String?) -> JobPayload { .receipt(ReceiptJob(receipt: "MII", submission: Submission(userIdentifier: user))) }

    @Test("Jobs submitted for any merged id, or naming the customer's receipt or event, are theirs")
    func theirs() {
        #expect(erased.holds(job(receiptJob("old"))) && erased.holds(job(receiptJob("new"))))
        let transaction = JobPayload.transaction(
            TransactionJob(signedTransaction: nil, transactionID: "1", submission: Submission(userIdentifier: "new")))
        #expect(erased.holds(job(transaction)))
        #expect(erased.holds(job(receiptJob(nil), id: receipt)), "the job of a stored receipt has its id")
        let repoll = JobPayload.repoll(
            RepollJob(target: RepollTarget(originalTransactionID: "1", receiptID: receipt, pollSequence: 1), latestReceipt: "MII"))
        #expect(erased.holds(job(repoll)))
        let delivery = JobPayload.delivery(
            WebhookDelivery(target: WebhookTarget(deliveryID: 1, endpointID: UUID(), eventID: event, eventType: "receipt.validated"), body: "{}"))
        #expect(erased.holds(job(delivery)))
    }

    @Test("Another app's, another user's, an anonymous one and Apple's notifications are not")
    func notTheirs() {
        #expect(!erased.holds(job(receiptJob("old"), app: UUID())), "another app's user of the same id")
        #expect(!erased.holds(job(receiptJob("someone"))) && !erased.holds(job(receiptJob(nil))))
        let delivery = JobPayload.delivery(
            WebhookDelivery(target: WebhookTarget(deliveryID: 1, endpointID: UUID(), eventID: UUID(), eventType: "customer.erased"), body: "{}"))
        #expect(!erased.holds(job(delivery)), "the erasure's own event is not among the erased ones")
        #expect(!erased.holds(job(.notification(NotificationJob(notificationID: "n", body: "{}")))))
    }
}
