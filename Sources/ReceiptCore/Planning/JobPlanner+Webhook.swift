import Foundation

/// How a webhook job starts: a delivery to send, or a plan that settles it without one.
public enum WebhookStart: Sendable, Equatable {
    case send(WebhookRequest)
    case settle(JobPlan)
}

extension JobPlanner {
    /// What a delivery job does with its endpoint as the store has it now: send the event, wait
    /// (a paused endpoint: the job keeps its attempts and asks again in a minute), or stop (the
    /// endpoint was removed: its deliveries went with it).
    public func webhookStart(_ envelope: JobEnvelope, _ delivery: WebhookDelivery, endpoint: WebhookEndpointRecord?) -> WebhookStart {
        let target = delivery.target
        guard let endpoint else {
            return .settle(
                .deliver(
                    envelope,
                    deliveryOutcome(delivery, attempts: envelope.attempt, status: .delivered, httpStatus: nil, errorCode: .endpointRemoved)))
        }
        if endpoint.pausedAt != nil {
            return .settle(.retry(envelope, runAt: now().addingTimeInterval(60), outcome: .deferred))
        }
        guard !endpoint.secrets.isEmpty else {
            return .settle(
                .bury(
                    envelope.failed(
                        code: .webhookSecretUnreadable, message: "the endpoint's secret cannot be opened: check RECEIPTQ_SECRETS_KEY, then retry",
                        calls: [], at: now())))
        }
        return .send(
            WebhookRequest(
                url: endpoint.url, body: Array(delivery.body.utf8), eventID: target.eventID, eventType: target.eventType,
                secrets: endpoint.secrets, timestamp: Int64(now().timeIntervalSince1970), allowPrivate: endpoint.allowPrivate))
    }

    /// What an attempt's report means: delivered (stored, acknowledged), or tried again with
    /// backoff until the retry budget (3 days by default) is spent, then a dead letter an operator
    /// can redeliver.
    public func webhook(
        _ envelope: JobEnvelope, _ delivery: WebhookDelivery, report: WebhookReport, using generator: inout some RandomNumberGenerator
    ) -> JobPlan {
        if report.isDelivered {
            var delivered = envelope
            delivered.attempt += 1
            return .deliver(
                delivered,
                deliveryOutcome(delivery, attempts: delivered.attempt, status: .delivered, httpStatus: report.httpStatus, errorCode: nil))
        }
        let code = report.errorCode ?? report.httpStatus.map { .http($0) } ?? .unknown
        let message = report.httpStatus.map { "the endpoint answered \($0)" } ?? "the endpoint could not be reached (\(code))"
        let failed = envelope.failed(code: code, message: message, calls: [], at: now())
        guard
            let runAt = retryPolicy.nextRun(attempt: failed.attempt, firstFailedAt: failed.firstFailedAt ?? now(), now: now(), using: &generator)
        else { return .bury(failed) }
        return .retry(failed, runAt: runAt, outcome: .retried)
    }

    /// What a delivery attempt leaves in Postgres: its row, and its endpoint's run of failures.
    func deliveryOutcome(
        _ delivery: WebhookDelivery, attempts: Int, status: DeliveryOutcome.Status, httpStatus: Int?, errorCode: FailureCode?
    ) -> DeliveryOutcome {
        DeliveryOutcome(target: delivery.target, status: status, attempts: attempts, httpStatus: httpStatus, errorCode: errorCode, at: now())
    }

    /// The outcome of a failed delivery attempt that will be tried again (best effort, like a
    /// buried job's trace): the dashboard and the pause rule see the failure now. Nil for a job
    /// that is no delivery.
    public func deliveryAttemptOutcome(_ retried: JobEnvelope) -> DeliveryOutcome? {
        guard case .delivery(let delivery) = retried.payload else { return nil }
        return deliveryOutcome(
            delivery, attempts: retried.attempt, status: .retrying, httpStatus: retried.errorCode?.httpStatus, errorCode: retried.errorCode)
    }
}
