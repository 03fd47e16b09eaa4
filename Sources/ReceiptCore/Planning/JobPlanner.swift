import Foundation

/// What became of one job.
public enum JobOutcome: String, Sendable, Equatable, CaseIterable {
    case validated
    case invalid
    case retried
    case dead
    /// Apple is down for everyone (the circuit is open): put back without using an attempt.
    case deferred
}

/// What the worker must do with one job, decided from what is known about it; the engine carries
/// it out in this order: store (in Postgres), then settle (in Redis).
public enum JobPlan: Sendable, Equatable {
    /// Store Apple's verdict, then acknowledge with the stored resource for a waiting API request.
    case store(ValidationRecord)
    /// Record a webhook delivery's outcome (delivered, or its endpoint gone), then acknowledge.
    case deliver(JobEnvelope, DeliveryOutcome)
    /// Record the answer Apple took to a consumption request (nil: none was due), then acknowledge.
    case answer(JobEnvelope, ConsumptionAnswer?)
    /// Back to the retry set, to run again at `runAt`; `outcome` is `.retried` or `.deferred`.
    case retry(JobEnvelope, runAt: Date, outcome: JobOutcome)
    /// To the dead letters with its history (nil: the job's bytes were not an envelope); marked
    /// `failed` in Postgres first when Postgres is reachable.
    case bury(JobEnvelope?)

    /// The outcome the plan leads to once carried out.
    public var outcome: JobOutcome {
        switch self {
        case .store(let record): record.status == .valid ? .validated : .invalid
        case .deliver, .answer: .validated
        case .retry(_, _, let outcome): outcome
        case .bury: .dead
        }
    }
}

/// What a buried job leaves in Postgres besides its dead letter.
public enum BuriedTrace: Sendable, Equatable {
    /// A validation's `failed` receipts row (or a re-poll's next poll).
    case record(ValidationRecord)
    /// A delivery's dead outcome (its row and its endpoint's run of failures).
    case delivery(DeliveryOutcome)
}

/// Apple's rules for one job, as pure decisions: valid/invalid are stored; transient answers,
/// outages and a database that cannot store are retried with backoff until the retry budget is
/// spent; a configuration error (21004) is buried at once. No I/O: time and randomness come in.
///
/// The safety of the pipeline rests on the order the engine follows for each plan: a job leaves the
/// processing list only after Postgres committed (acknowledge) or together with its move to the
/// retry/dead set (one Redis transaction), so a crash at any instant leaves it in processing for
/// the janitor, and a replay is harmless because `ReceiptStore.save` is idempotent.
public struct JobPlanner: Sendable {
    /// Backoff and give-up rules.
    public var retryPolicy: RetryPolicy
    /// When subscriptions are polled again.
    public var repollPolicy: RepollPolicy
    /// The injected clock of the job's own time: when a result was validated, when a retry runs
    /// (Apple's `Retry-After` and the backoff are the machine's seconds, and Redis's retry set is
    /// promoted on them).
    public var now: @Sendable () -> Date
    /// The clock a subscription's times are planned on: its next poll, the retry of a buried
    /// re-poll, and when it was polled or notified (``ValidationRecord/plannedAt``), which the
    /// scheduler's re-poll claims compare with their own clock (``RepollSafetyNet``). Nil: `now`,
    /// as in production, where both are the machine's. The conformance suite's deployment gives
    /// its simulated clock (the one Apple's answers are dated by), so that its re-polls come due
    /// as its clock jumps while the worker's retries keep the machine's pace.
    public var observedAt: (@Sendable () -> Date)?

    /// Creates a planner.
    public init(
        retryPolicy: RetryPolicy, repollPolicy: RepollPolicy = RepollPolicy(), now: @escaping @Sendable () -> Date,
        observedAt: (@Sendable () -> Date)? = nil
    ) {
        self.retryPolicy = retryPolicy
        self.repollPolicy = repollPolicy
        self.now = now
        self.observedAt = observedAt
    }

    /// The subscriptions' time of a record validated at `at` (the same instant when there is no
    /// separate clock, so production reads its clock once per record, as before).
    func plannedAt(_ at: Date) -> Date { observedAt?() ?? at }

    /// Apple is down for everyone: wait for the probe, spread over 10 s so the queue does not
    /// stampede when the circuit closes, and keep the attempt: the outage is not the receipt's fault.
    public func deferred(_ envelope: JobEnvelope, until: Date, using generator: inout some RandomNumberGenerator) -> JobPlan {
        .retry(envelope, runAt: until.addingTimeInterval(Double.random(in: 0...10, using: &generator)), outcome: .deferred)
    }

    /// A rate limit, Apple's (`429`) or a bulk import's own budget, holds the job until `until`:
    /// the deployment's limit, not the receipt's fault, so no attempt is spent; spread over a
    /// second so the whole app's backlog does not return at one instant.
    public func rateLimited(_ envelope: JobEnvelope, until: Date, using generator: inout some RandomNumberGenerator) -> JobPlan {
        .retry(envelope, runAt: max(until, now()).addingTimeInterval(Double.random(in: 0...1, using: &generator)), outcome: .deferred)
    }

    /// The job names an app that is not registered (deleted since it was queued).
    public func unknownApp(_ envelope: JobEnvelope) -> JobPlan {
        .bury(envelope.failed(code: .unknownApp, message: "app not registered", calls: [], at: now()))
    }

    /// The ingestion node found the receipt forged or another app's (`envelope.fraudReason`): it is
    /// stored as fraud, with no purchases in the ledger, so a forged copy never claims a transaction id.
    public func fraud(_ envelope: JobEnvelope) -> JobPlan {
        .store(
            ValidationRecord(
                envelope: envelope, status: .fraud, environment: envelope.payload.environment, appleStatus: nil, purchases: [],
                latestReceipt: nil, calls: [], validatedAt: now()))
    }

    /// Postgres could not be read or written: run the job again later (Apple's answer is not lost
    /// for good, it is asked again).
    public func storeUnavailable(
        _ envelope: JobEnvelope, calls: [AppleCall], code: FailureCode = .storeUnavailable, using generator: inout some RandomNumberGenerator
    ) -> JobPlan {
        retryOrBury(envelope, code: code, message: "the result could not be stored", calls: calls, using: &generator)
    }

    /// Postgres refused the result itself (``StoreFailure/isPermanent``): asking Apple again would
    /// get the same answer refused the same way, so the job goes to the dead letters at once, with
    /// the SQLSTATE and the database's (scrubbed) reason for the operator.
    public func storeRefused(_ envelope: JobEnvelope, calls: [AppleCall], failure: StoreFailure) -> JobPlan {
        .bury(envelope.failed(code: .storeRefused, message: "\(failure.message) (SQLSTATE \(failure.code))", calls: calls, at: now()))
    }

    /// What Apple's answer (or the transport failure) means for the job: one path, whichever API
    /// answered.
    /// - Parameter sandboxPolicy: the app's; `reject` stores a sandbox result as invalid.
    public func plan(
        _ envelope: JobEnvelope, outcome: ValidationOutcome, sandboxPolicy: SandboxPolicy = .accept,
        using generator: inout some RandomNumberGenerator
    ) -> JobPlan {
        let code = outcome.failure ?? outcome.appleStatus.map { .apple($0) } ?? .unknown
        if let until = outcome.rateLimitedUntil {
            // A rate limit: wait it out; the calls still go to the audit trail via `history`.
            var waiting = envelope
            waiting.history = (waiting.history + outcome.calls).suffix(50)
            return rateLimited(waiting, until: until, using: &generator)
        }
        if sandboxPolicy == .reject, outcome.verdict == .valid, outcome.environment == "sandbox" {
            return .store(
                ValidationRecord(
                    envelope: envelope, status: .invalid, environment: "sandbox", appleStatus: outcome.appleStatus, purchases: [],
                    latestReceipt: nil, calls: outcome.calls, validatedAt: now(), errorCode: .sandboxRejected, validatedBy: outcome.backend))
        }
        switch outcome.verdict {
        case .valid, .invalid:
            let at = now()
            let planned = plannedAt(at)
            var record = ValidationRecord(
                envelope: envelope, status: outcome.verdict == .valid ? .valid : .invalid, environment: outcome.environment,
                appleStatus: outcome.appleStatus, purchases: outcome.purchases, latestReceipt: outcome.latestReceipt, calls: outcome.calls,
                validatedAt: at,
                subscriptions: outcome.subscriptions.map {
                    PlannedSubscription(state: $0, nextPollAt: repollPolicy.nextPoll(for: $0, at: planned, using: &generator))
                }, errorCode: outcome.verdict == .invalid ? code : nil, validatedBy: outcome.backend)
            record.plannedAt = planned
            record.historyCursor = outcome.historyCursor
            return .store(record)
        case .configurationError:
            return .bury(
                envelope.failed(
                    code: outcome.appleStatus == 21004 ? .sharedSecretMismatch : code,
                    message: "Apple rejected the request: fix the app's configuration, then retry", calls: outcome.calls, at: now()))
        case .transient
        where outcome.appleStatus == 21002 && envelope.payload.style != nil
            && envelope.attempt + 1 >= retryPolicy.malformedAttempts:
            // The bytes decoded as a receipt here, yet Apple keeps calling them malformed: after a
            // bounded number of tries that is Apple's answer, stored, not retried for 72 hours.
            let failed = envelope.failed(code: code, message: "Apple keeps answering 21002 (malformed)", calls: outcome.calls, at: now())
            return .store(
                ValidationRecord(
                    envelope: failed, status: .invalid, environment: outcome.environment, appleStatus: 21002, purchases: [],
                    latestReceipt: nil, calls: outcome.calls, validatedAt: now(), errorCode: code))
        case .transient, .outage, .switchEnvironment:
            return retryOrBury(envelope, code: code, message: "Apple did not validate the receipt yet", calls: outcome.calls, using: &generator)
        }
    }

    /// What a buried job leaves in Postgres (best effort; the dead letter is what counts): a
    /// validation its `failed` row, a delivery its dead outcome, a notification nothing (its dead
    /// letter is the record). A buried re-poll leaves its subscription to be polled again after
    /// `troubleInterval` (a day by default): a dead letter must not end a subscription's polling for good.
    public func buriedTrace(_ failed: JobEnvelope) -> BuriedTrace? {
        let at = now()
        let planned = plannedAt(at)
        var retryPollAt: Date?
        switch failed.payload {
        case .notification, .consumption:
            return nil
        case .delivery(let delivery):
            return .delivery(
                deliveryOutcome(
                    delivery, attempts: failed.attempt, status: .dead, httpStatus: failed.errorCode?.httpStatus, errorCode: failed.errorCode))
        case .repoll:
            retryPollAt = planned.addingTimeInterval(repollPolicy.troubleInterval.seconds)
        case .receipt, .transaction, .importItem:
            retryPollAt = nil
        }
        var record = ValidationRecord(
            envelope: failed, status: .failed, environment: nil, appleStatus: failed.history.last?.appleStatus, purchases: [],
            latestReceipt: nil, calls: [], validatedAt: at, retryPollAt: retryPollAt)
        record.plannedAt = planned
        return .record(record)
    }

    private func retryOrBury(
        _ envelope: JobEnvelope, code: FailureCode, message: String, calls: [AppleCall], using generator: inout some RandomNumberGenerator
    ) -> JobPlan {
        let failed = envelope.failed(code: code, message: message, calls: calls, at: now())
        guard
            let runAt = retryPolicy.nextRun(
                attempt: failed.attempt, firstFailedAt: failed.firstFailedAt ?? now(), now: now(), using: &generator)
        else { return .bury(failed) }
        return .retry(failed, runAt: runAt, outcome: .retried)
    }
}
