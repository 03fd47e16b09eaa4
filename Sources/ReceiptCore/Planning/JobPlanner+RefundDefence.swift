import Foundation

/// How a consumption job starts: a body to send, or a plan that settles it without one.
public enum ConsumptionStart: Sendable, Equatable {
    case send(ConsumptionInformation)
    case settle(JobPlan)
}

/// What Send Consumption Information answered.
public enum ConsumptionReport: Sendable, Equatable {
    /// Apple took it (2xx).
    case accepted
    /// Apple's limit: ask again at this time.
    case rateLimited(until: Date)
    /// A failure worth another try (transport, 5xx, Apple's retryable codes).
    case transient(FailureCode)
    /// A failure another try would meet again (401, a 4xx refusing the body): a dead letter.
    case refused(FailureCode)
}

extension JobPlanner {
    /// The consumption job a stored V2 `CONSUMPTION_REQUEST` becomes: due at once, with Apple's
    /// deadline (12 hours after it signed the request). Nil for every other notification, and for a
    /// request without a transaction (nothing to answer about).
    func consumptionJob(_ envelope: JobEnvelope, _ notification: AppleNotification, transactionID: String?) -> JobEnvelope? {
        guard notification.version == .v2, notification.type == "CONSUMPTION_REQUEST", let transactionID else { return nil }
        var header = JobHeader(id: envelope.id, appID: envelope.appID, enqueuedAt: now(), origin: envelope.header.origin)
        header.version = envelope.header.version
        let job = ConsumptionJob(
            notificationID: notification.uuid, transactionID: transactionID,
            deadline: notification.signedDate.addingTimeInterval(RefundDefence.answerWindow), bundleID: envelope.payload.bundleID,
            environment: notification.environment ?? envelope.payload.environment)
        return JobEnvelope(header: header, payload: .consumption(job))
    }

    /// What a consumption job does with the facts the store holds now: send the policy's body, or
    /// settle without a call (policy `off`, no consent, answered already), or give up when
    /// Apple's deadline passed (a dead letter with its code: an alert, not a silent loss).
    public func consumptionStart(_ envelope: JobEnvelope, _ job: ConsumptionJob, facts: ConsumptionFacts) -> ConsumptionStart {
        switch RefundDefence.decide(facts) {
        case .skip:
            return .settle(.answer(envelope, nil))
        case .send(let body):
            guard now() < job.deadline else { return .settle(deadlinePassed(envelope, calls: [])) }
            return .send(body)
        }
    }

    /// What Apple's answer means: recorded (accepted), tried again with backoff while the deadline
    /// allows (never after it: the retry is cut to the deadline's side), or a dead letter.
    public func consumption(
        _ envelope: JobEnvelope, _ job: ConsumptionJob, facts: ConsumptionFacts, body: ConsumptionInformation, report: ConsumptionReport,
        using generator: inout some RandomNumberGenerator
    ) -> JobPlan {
        let code: FailureCode
        switch report {
        case .accepted:
            var answered = envelope
            answered.attempt += 1
            return .answer(
                answered, ConsumptionAnswer(appID: envelope.appID, jobID: envelope.id, job: job, facts: facts, body: body, sentAt: now()))
        case .rateLimited(let until):
            guard until < job.deadline else { return deadlinePassed(envelope, calls: []) }
            return rateLimited(envelope, until: until, using: &generator)
        case .refused(let refused):
            return .bury(envelope.failed(code: refused, message: "Apple refused the consumption information", calls: [], at: now()))
        case .transient(let transient):
            code = transient
        }
        let failed = envelope.failed(code: code, message: "Apple did not take the consumption information yet", calls: [], at: now())
        guard
            let runAt = retryPolicy.nextRun(attempt: failed.attempt, firstFailedAt: failed.firstFailedAt ?? now(), now: now(), using: &generator),
            runAt < job.deadline
        else { return deadlinePassed(failed, calls: []) }
        return .retry(failed, runAt: runAt, outcome: .retried)
    }

    private func deadlinePassed(_ envelope: JobEnvelope, calls: [AppleCall]) -> JobPlan {
        .bury(
            envelope.failed(
                code: .consumptionDeadlinePassed, message: "Apple's 12 hours to answer the consumption request passed", calls: calls, at: now()))
    }
}
