import Foundation
import ReceiptCore

/// An in-memory `JobQueue` recording every transition, for worker tests without Redis.
public final class MemoryJobQueue: JobQueue, @unchecked Sendable {
    // Several lanes share one queue in pool tests; the condition guards the lists and lets an
    // empty reserve wait like BLMOVE does, instead of spinning a lane at 100% CPU.
    private let lock = NSCondition()
    private var ready: [[UInt8]] = []
    private var processing: [[UInt8]] = []
    public private(set) var acknowledged: [(job: ReservedJob, result: [UInt8]?)] = []
    public private(set) var retries: [(envelope: JobEnvelope, runAt: Date)] = []
    public private(set) var dead: [JobEnvelope?] = []
    /// The activity each non-empty settle reported, in order (what Redis would have counted).
    public private(set) var activity: [ActivityTally] = []

    /// Every reported activity added up.
    public var totalActivity: ActivityTally {
        lock.withLock {
            activity.reduce(into: ActivityTally()) { total, tally in
                total.outcomes.merge(tally.outcomes, uniquingKeysWith: +)
                total.failures.merge(tally.failures, uniquingKeysWith: +)
            }
        }
    }

    /// Creates a queue holding `jobs`.
    public init(jobs: [JobEnvelope] = []) { ready = jobs.map { $0.encoded() } }

    /// Adds raw bytes (e.g. a poison job).
    public func push(raw: [UInt8]) {
        lock.withLock {
            ready.append(raw)
            lock.broadcast()
        }
    }

    /// Jobs still in processing (reserved and never resolved).
    public var inProcessing: Int { lock.withLock { processing.count } }

    /// Jobs waiting in the queue (not reserved).
    public var waiting: Int { lock.withLock { ready.count } }

    public func reserve(max: Int, timeout: Duration) throws -> [ReservedJob] {
        lock.withLock {
            let deadline = Date().addingTimeInterval(timeout.seconds)
            while ready.isEmpty, lock.wait(until: deadline) {}
            let taken = Array(ready.prefix(Swift.max(1, max)))
            ready.removeFirst(taken.count)
            processing.append(contentsOf: taken)
            return taken.map(ReservedJob.init(raw:))
        }
    }

    public func settle(_ settlements: [Settlement], activity: ActivityTally) throws {
        lock.withLock {
            if !activity.isEmpty { self.activity.append(activity) }
            for settlement in settlements {
                remove(settlement.job)
                switch settlement {
                case .acknowledge(let job, let result): acknowledged.append((job, result))
                case .retry(_, let updated, let runAt): retries.append((updated, runAt))
                case .bury(_, let updated, _): dead.append(updated)
                }
            }
        }
    }

    public func reconcile(keeping inFlight: [[UInt8]], settledAgain: (ReservedJob) -> Settlement?) throws -> Reconciliation {
        let (again, requeued) = lock.withLock { () -> ([Settlement], Int) in
            var kept = inFlight
            var strays: [[UInt8]] = []
            var again: [Settlement] = []
            for raw in processing {
                if let index = kept.firstIndex(of: raw) {
                    kept.remove(at: index)
                } else if let settlement = settledAgain(ReservedJob(raw: raw)) {
                    again.append(settlement)
                } else {
                    strays.append(raw)
                }
            }
            for raw in strays { remove(ReservedJob(raw: raw)) }
            ready.insert(contentsOf: strays, at: 0)
            return (again, strays.count)
        }
        try settle(again, activity: ActivityTally())
        return Reconciliation(resettled: again.count, requeued: requeued)
    }

    /// Leaves `job` in the processing list while a settle removes it: what a primary that took the
    /// settle and was lost in a failover leaves behind (its replica never heard of the settle).
    public func restoreToProcessing(_ job: ReservedJob) {
        lock.withLock { processing.append(job.raw) }
    }

    /// How many heartbeats the worker sent: the fetcher sends one per pass of its loop once its
    /// `heartbeatInterval` is zero, so a test can tell that it went round again.
    public var heartbeats: Int { lock.withLock { beats } }
    private var beats = 0

    public func heartbeat(busy: Int) throws { lock.withLock { beats += 1 } }

    private func remove(_ job: ReservedJob) {
        if let index = processing.firstIndex(of: job.raw) { processing.remove(at: index) }
    }
}

/// An in-memory `ReceiptStore`, `DeliveryLog` and `RefundDefenceLog`: saves records, delivery
/// outcomes and consumption answers, and can be told to fail (a Postgres outage).
public final class MemoryReceiptStore: ReceiptStore, DeliveryLog, RefundDefenceLog, @unchecked Sendable {
    private let lock = NSLock()
    public var apps: [UUID: AppRecord]
    public private(set) var saved: [ValidationRecord] = []
    /// The webhook endpoints deliveries send to, by id.
    public var endpoints: [UUID: WebhookEndpointRecord] = [:]
    public private(set) var deliveries: [DeliveryOutcome] = []
    /// The facts every consumption request finds (the policy `off` unless a test sets them).
    public var consumptionFacts = ConsumptionFacts(policy: .off)
    public private(set) var answers: [ConsumptionAnswer] = []
    private var claims: [String: UUID] = [:]
    /// When set, every call throws it.
    public var failure: (any Error)?

    /// Creates a store knowing `apps`.
    public init(apps: [AppRecord] = []) {
        self.apps = Dictionary(uniqueKeysWithValues: apps.map { ($0.id, $0) })
    }

    public func app(id: UUID) throws -> AppRecord? {
        try lock.withLock {
            if let failure { throw failure }
            return apps[id]
        }
    }

    public func historyCursors(_ keys: Set<HistoryKey>) throws -> [HistoryKey: HistoryCursor] {
        try lock.withLock {
            if let failure { throw failure }
            // The last saved record that read each customer's history, as Postgres keeps the last one.
            return saved.reduce(into: [:]) { cursors, record in
                guard let cursor = record.historyCursor else { return }
                let key = HistoryKey(appID: record.envelope.appID, originalTransactionID: cursor.originalTransactionID)
                if keys.contains(key) { cursors[key] = cursor }
            }
        }
    }

    public func save(_ records: [ValidationRecord]) throws -> [Result<ReceiptResource?, StoreFailure>] {
        try lock.withLock {
            if let failure { throw failure }
            saved.append(contentsOf: records)
            return records.map { record in
                .success(
                    ReceiptResource(
                        id: record.envelope.id, style: record.envelope.payload.style, appFamilyID: record.envelope.appID,
                        bundleID: record.envelope.payload.bundleID, environment: record.environment,
                        submission: record.envelope.payload.purchase?.submission ?? Submission(),
                        validationStatus: record.status, appleStatus: record.appleStatus,
                        inAppPurchases: record.purchases.map { InAppPurchaseResource($0) }, createdAt: record.envelope.enqueuedAt,
                        updatedAt: record.validatedAt))
            }
        }
    }

    public func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord? {
        try lock.withLock {
            if let failure { throw failure }
            return endpoints[id]
        }
    }

    public func record(_ outcomes: [DeliveryOutcome]) throws {
        try lock.withLock {
            if let failure { throw failure }
            deliveries.append(contentsOf: outcomes)
        }
    }

    public func consumptionFacts(appID: UUID, environment: String?, transactionID: String, notificationID: String) throws -> ConsumptionFacts {
        try lock.withLock {
            if let failure { throw failure }
            var facts = consumptionFacts
            facts.alreadyAnswered = answers.contains { $0.appID == appID && $0.notificationID == notificationID }
            return facts
        }
    }

    public func claimConsumption(appID: UUID, notificationID: String, transactionID: String, job: UUID) throws -> Bool {
        try lock.withLock {
            if let failure { throw failure }
            let key = "\(appID)/\(notificationID)"
            if claims[key] == nil { claims[key] = job }
            return claims[key] == job
        }
    }

    public func record(_ answers: [ConsumptionAnswer]) throws {
        try lock.withLock {
            if let failure { throw failure }
            for answer in answers where !self.answers.contains(where: { $0.appID == answer.appID && $0.notificationID == answer.notificationID }) {
                self.answers.append(answer)
            }
        }
    }
}

/// A `ReceiptVerifier` that answers from a script, for worker tests without HTTP.
public final class StubVerifier: ReceiptVerifier, @unchecked Sendable {
    private let lock = NSLock()
    private var reports: [ValidationOutcome]
    public private(set) var requests: [ValidationRequest] = []

    /// Answers with `reports` in order, repeating the last one.
    public init(_ reports: [ValidationOutcome]) { self.reports = reports }

    public func verify(_ request: ValidationRequest, completion: @escaping @Sendable (ValidationOutcome) -> Void) {
        let report = lock.withLock {
            requests.append(request)
            return reports.count > 1 ? reports.removeFirst() : reports[0]
        }
        // Answer on another thread, as the HTTP engine does, never inside the caller's call.
        DispatchQueue.global().async { completion(report) }
    }

    /// The outcome of one `verifyReceipt` call answered with `status` and `transactions` (in the
    /// sandbox), its subscriptions computed at `at`.
    public static func report(
        status: Int, verdict: AppleVerdict, transactions: [JSONValue] = [], at: Date = Date()
    ) -> ValidationOutcome {
        let response = VerifyReceiptResponse(
            json: .object([
                "status": .number(Double(status)), "environment": .string("Sandbox"),
                "receipt": .object(["in_app": .array(transactions)]),
            ]))
        return ValidationOutcome(
            verdict: verdict, response: response,
            calls: [
                AppleCall(endpoint: .production, httpStatus: 200, appleStatus: status, isRetryable: nil, latencyMs: 5, errorCode: nil)
            ], failure: verdict == .valid || verdict == .invalid ? nil : .apple(status), at: at)
    }
}

/// A seeded random generator (SplitMix64) so backoff and fuzz tests are reproducible.
public struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    /// Creates a generator from `seed`.
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
