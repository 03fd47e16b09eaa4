import Foundation
import Logging
import ReceiptCore

/// The committers: a few threads, each with its own Postgres and Redis connection, that take
/// every decided plan waiting (up to `commitBatch`), store them in one Postgres transaction and
/// settle them in one Redis round trip. A job stays in flight (and in the processing list) until
/// its settlement: what the engine's doc comment promises ("nothing is lost") is kept here.
extension WorkerEngine {
    func runCommitter(_ index: Int) {
        let role = "committer-\(index)"
        var queue: (any JobQueue)?
        var store: (any WorkerStore)?
        var rng = SystemRandomNumberGenerator()
        while let batch = takeBatch() {
            let takenAt = DispatchTime.now().uptimeNanoseconds
            // Created once; its connection reconnects by itself after a Postgres restart.
            if store == nil { store = try? makeStore(role) }
            var settlements: [Settlement] = []
            var outcomes: [JobOutcome] = []
            var activity = ActivityTally()
            for (settlement, outcome) in commit(batch, store: store, using: &rng) {
                settlements.append(settlement)
                outcomes.append(outcome)
                activity.add(outcome.activity, failure: settlement.failureCode)
            }
            let committedAt = DispatchTime.now().uptimeNanoseconds
            var pause = 0.1
            // Repeated until Redis takes it: the jobs stay in flight (their slots held) meanwhile.
            while true {
                do {
                    if queue == nil { queue = try makeQueue(role) }
                    try queue?.settle(settlements, activity: activity)
                    // Before the jobs leave the in-flight set: a reconcile that no longer keeps
                    // them finds how they were settled.
                    settledJobs.record(settlements, at: now())
                    break
                } catch {
                    logger.warning("Worker settle error", error: error)
                    // An earlier settle this server answered may be lost with it (a failover): the
                    // fetcher compares the processing list with what is in flight once Redis answers.
                    locked { $0.reconcileDue = true }
                    if locked({ $0.abandoned }) { return }
                    Thread.sleep(forTimeInterval: pause)
                    pause = min(pause * 2, 5)
                }
            }
            let freedAt = DispatchTime.now().uptimeNanoseconds
            condition.lock()
            for (item, outcome) in zip(batch, outcomes) {
                shared.inFlight[item.token] = nil
                shared.outcomes[outcome, default: 0] += 1
            }
            condition.broadcast()
            condition.unlock()
            let settledAt = now()
            for (item, outcome) in zip(batch, outcomes) {
                metrics.settled(outcome, envelope: item.job.envelope, at: settledAt)
                let kind = item.job.envelope?.kind
                if let call = item.callNanoseconds { metrics.stage(.call, kind: kind, nanoseconds: call) }
                metrics.stage(.commitWait, kind: kind, nanoseconds: takenAt &- item.decidedAt)
                metrics.stage(.commit, kind: kind, nanoseconds: committedAt &- takenAt)
                metrics.stage(.settle, kind: kind, nanoseconds: freedAt &- committedAt)
            }
        }
    }

    /// Every decided job, up to `commitBatch`; nil once the fetcher stopped and nothing is left in
    /// hand, or when shutdown gave up on the jobs in hand.
    private func takeBatch() -> [Decided]? {
        decisions.lock()
        defer { decisions.unlock() }
        while true {
            let (abandoned, drained) = locked { ($0.abandoned, $0.fetcherDone && $0.inFlight.isEmpty) }
            if abandoned { return nil }
            if !decided.isEmpty {
                let age = Duration.nanoseconds(DispatchTime.now().uptimeNanoseconds &- decided[0].decidedAt)
                // Lingering only pays while answers are still coming: a lone job commits at once.
                let lingers = locked { !$0.stopping && !$0.calling.isEmpty }
                if decided.count < configuration.commitBatch, age < configuration.commitLinger, lingers {
                    _ = decisions.wait(until: Date().addingTimeInterval((configuration.commitLinger - age).seconds))
                    continue
                }
                let count = min(decided.count, configuration.commitBatch)
                let batch = Array(decided.prefix(count))
                decided.removeFirst(count)
                // More left: let another committer take it while this one commits.
                if !decided.isEmpty { decisions.signal() }
                return batch
            }
            if drained { return nil }
            _ = decisions.wait(until: Date().addingTimeInterval(0.2))
        }
    }

    /// Stores what must be stored (the validations in one call to the store, the deliveries' outcomes
    /// in one to the delivery log) and turns each plan into its settlement.
    private func commit(
        _ batch: [Decided], store: (any WorkerStore)?, using generator: inout SystemRandomNumberGenerator
    ) -> [(Settlement, JobOutcome)] {
        var records: [ValidationRecord?] = []
        var deliveries: [DeliveryOutcome] = []
        var answers: [ConsumptionAnswer] = []
        for item in batch {
            switch item.plan {
            case .store(let record):
                records.append(record)
            case .answer(_, let answer):
                records.append(nil)
                if let answer { answers.append(answer) }
            case .deliver(_, let outcome):
                records.append(nil)
                deliveries.append(outcome)
            // What a buried job leaves in Postgres is best effort; the dead letter is what counts.
            case .bury(let failed?):
                switch planner.buriedTrace(failed) {
                case .record(let record): records.append(record)
                case .delivery(let outcome):
                    records.append(nil)
                    deliveries.append(outcome)
                case nil: records.append(nil)
                }
            // A failed delivery's attempt is recorded (best effort): its endpoint's run of failures
            // decides when the endpoint is paused.
            case .retry(let updated, _, .retried):
                records.append(nil)
                if let outcome = planner.deliveryAttemptOutcome(updated) { deliveries.append(outcome) }
            case .bury(nil), .retry:
                records.append(nil)
            }
        }
        let written = records.compactMap { $0 }
        var results: [Result<ReceiptResource?, StoreFailure>] = []
        var deliveriesRecorded = deliveries.isEmpty
        var answersRecorded = answers.isEmpty
        if let store {
            do {
                if !written.isEmpty { results = try store.save(written) }
                if !deliveries.isEmpty {
                    try store.record(deliveries)
                    deliveriesRecorded = true
                }
                if !answers.isEmpty {
                    try store.record(answers)
                    answersRecorded = true
                }
            } catch {
                // The façade reconnects on its next call; what was not stored is retried.
                logger.warning("Worker store error", error: error)
            }
        }
        var stored = results.makeIterator()
        let at = now()
        return zip(batch, records).map { item, record in
            let result = record == nil ? nil : stored.next()
            var plan = item.plan
            if case .deliver(let envelope, _) = item.plan {
                guard deliveriesRecorded else {
                    return settlement(item, planner.storeUnavailable(envelope, calls: [], using: &generator), at: at)
                }
                return (.acknowledge(item.job, result: nil), item.plan.outcome)
            }
            if case .answer(let envelope, let answer) = item.plan {
                guard answer == nil || answersRecorded else {
                    return settlement(item, planner.storeUnavailable(envelope, calls: [], using: &generator), at: at)
                }
                metrics.consumption(answer == nil ? .skipped : .sent)
                return (.acknowledge(item.job, result: nil), item.plan.outcome)
            }
            if case .store(let record) = item.plan {
                switch result {
                case .success(let resource)?:
                    logger.debug(
                        "Job stored",
                        metadata: [
                            "job.id": "\(record.envelope.id.uuidString.lowercased())", "job.kind": "\(record.envelope.kind.rawValue)",
                            "app.id": "\(record.envelope.appID.uuidString.lowercased())",
                            "job.outcome": "\(item.plan.outcome.rawValue)", "apple.status": "\(record.appleStatus.map(String.init) ?? "-")",
                        ])
                    if let notification = record.notification { metrics.notificationStored(type: notification.type) }
                    // A stored consumption request becomes its answer's job in the same move that
                    // takes it off the processing list: one answer job for each request stored.
                    if let next = record.followUp { return (.retry(item.job, updated: next, runAt: at), item.plan.outcome) }
                    return (.acknowledge(item.job, result: resource?.encoded()), item.plan.outcome)
                case .failure(let failure)? where failure.isPermanent:
                    logger.warning("Postgres refused a result", error: failure, metadata: ["job.id": "\(record.envelope.id.uuidString.lowercased())"])
                    plan = planner.storeRefused(record.envelope, calls: record.calls, failure: failure)
                case .failure(let failure)?:
                    logger.warning(
                        "Postgres could not store a result", error: failure, metadata: ["job.id": "\(record.envelope.id.uuidString.lowercased())"])
                    plan = planner.storeUnavailable(record.envelope, calls: record.calls, code: .storeRefused, using: &generator)
                case nil:
                    plan = planner.storeUnavailable(record.envelope, calls: record.calls, using: &generator)
                }
            }
            return settlement(item, plan, at: at)
        }
    }

    /// The settlement of a plan that is no longer a store: a retry or a burial.
    private func settlement(_ item: Decided, _ plan: JobPlan, at: Date) -> (Settlement, JobOutcome) {
        switch plan {
        case .retry(let updated, let runAt, _):
            logger.debug(
                "Job scheduled for a retry",
                metadata: [
                    "job.id": "\(updated.id.uuidString.lowercased())", "job.attempt": "\(updated.attempt)",
                    "error.code": "\(updated.errorCode?.rawValue ?? "")",
                ])
            return (.retry(item.job, updated: updated, runAt: runAt), plan.outcome)
        case .bury(let updated):
            if case .consumption? = updated?.payload { metrics.consumption(.dead) }
            logger.info(
                "Job moved to the dead letters",
                metadata: [
                    "job.id": "\(updated?.id.uuidString.lowercased() ?? "unreadable")", "error.code": "\(updated?.errorCode?.rawValue ?? "")",
                ])
            return (.bury(item.job, updated: updated, at: at), plan.outcome)
        case .store, .deliver, .answer:
            preconditionFailure("a result that could not be stored is retried or buried, never stored")
        }
    }
}

extension Settlement {
    /// The failure a retry or a burial records (the updated envelope's code); nil for an
    /// acknowledgement, and for a burial of bytes that were never an envelope.
    fileprivate var failureCode: FailureCode? {
        switch self {
        case .acknowledge: nil
        case .retry(_, let updated, _): updated.errorCode
        case .bury(_, let updated, _): updated?.errorCode
        }
    }
}
