import Foundation

extension JobPlanner {
    /// What an App Store Server Notification job stores: its effect on the ledger and the
    /// subscriptions, with no call to Apple (the door checked its signatures; V2 is Apple's signed
    /// statement, V1 carries a `verifyReceipt` answer). The store decides whether it is new and
    /// whether it is the newest word on its subscription; the subscriptions it states are polled
    /// again on the usual schedule, so a missed notification is still caught by a re-poll.
    ///
    /// The job's body holds the V2 `signedPayload` (a compact JWS) or the V1 body as JSON text
    /// (which is how the two are told apart: a JWS never starts with `{`).
    public func notification(
        _ envelope: JobEnvelope, _ job: NotificationJob, using generator: inout some RandomNumberGenerator
    ) -> JobPlan {
        let notification: AppleNotification
        if job.body.hasPrefix("{") {
            guard let body = try? JSONValue.parse(Array(job.body.utf8)),
                let decoded = AppleNotification.v1(body: body, uuid: job.notificationID, receivedAt: envelope.enqueuedAt),
                !decoded.uuid.isEmpty
            else { return malformed(envelope) }
            notification = decoded
        } else {
            guard let decoded = try? AppleNotification.v2(signedPayload: job.body) else { return malformed(envelope) }
            notification = decoded
        }
        let effect = notification.effect
        let at = now()
        let planned = plannedAt(at)
        var record = ValidationRecord(
            envelope: envelope, status: .valid, environment: notification.environment ?? job.environment, appleStatus: nil,
            purchases: effect.purchases,
            latestReceipt: notification.unifiedReceipt?["latest_receipt"]?.stringValue, calls: [], validatedAt: at,
            subscriptions: effect.subscriptions.map {
                PlannedSubscription(state: $0, nextPollAt: repollPolicy.nextPoll(for: $0, at: planned, using: &generator))
            })
        record.plannedAt = planned
        record.notification = notification
        record.notificationTransactionID = effect.transactionID
        record.followUp = consumptionJob(envelope, notification, transactionID: effect.transactionID)
        return .store(record)
    }

    /// The door checked it, so this is a bug or a changed envelope: kept for an operator, never retried.
    private func malformed(_ envelope: JobEnvelope) -> JobPlan {
        .bury(envelope.failed(code: .malformedNotification, message: "the notification could not be decoded", calls: [], at: now()))
    }
}
