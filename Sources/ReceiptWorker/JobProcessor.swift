import Foundation
import Logging
import ReceiptCore
import Synchronization

/// The resources one worker lane owns: its own queue connection, store connection and HTTP handle.
public struct WorkerLane {
    public var queue: any JobQueue
    public var store: any ReceiptStore
    public var verifier: any ReceiptVerifier
    /// The shared outage circuit; nil calls Apple regardless.
    public var circuit: (any OutageCircuit)?

    /// Bundles a lane's resources.
    public init(
        queue: any JobQueue, store: any ReceiptStore, verifier: any ReceiptVerifier, circuit: (any OutageCircuit)? = nil
    ) {
        self.queue = queue
        self.store = store
        self.verifier = verifier
        self.circuit = circuit
    }
}

/// What became of one job.
public enum JobOutcome: String, Sendable, Equatable {
    case validated
    case invalid
    case retried
    case dead
    /// Apple is down for everyone (the circuit is open): put back without using an attempt.
    case deferred
}

/// Runs one job through Apple's rules: verify → store → acknowledge, or retry, or bury.
///
/// The order is what makes the pipeline safe: the job leaves the processing list only after
/// Postgres committed (acknowledge) or after it is in the retry/dead set (one Redis transaction), so a
/// crash at any instant leaves it in processing for the janitor, and a replay is harmless because
/// `ReceiptStore.save` is idempotent.
public struct JobProcessor {
    public var retryPolicy: RetryPolicy
    public var now: @Sendable () -> Date

    /// Creates a processor.
    /// - Parameters:
    ///   - retryPolicy: backoff and give-up rules.
    ///   - now: the injected clock.
    public init(retryPolicy: RetryPolicy, now: @escaping @Sendable () -> Date) {
        self.retryPolicy = retryPolicy
        self.now = now
    }

    /// Processes one reserved job on `lane`.
    /// - Throws: only queue errors (Redis unreachable): the job then stays in processing; the
    ///   lane's queue gives it back before its next reserve (the janitor, if the lane dies).
    public func process(
        _ job: ReservedJob, on lane: WorkerLane, logger: Logger, using generator: inout some RandomNumberGenerator
    ) throws -> JobOutcome {
        guard let envelope = job.envelope else {
            logger.warning("Undecodable job buried")
            try lane.queue.bury(job, updated: nil, at: now())
            return .dead
        }
        var logger = logger
        logger[metadataKey: "job.id"] = "\(envelope.id)"
        logger[metadataKey: "job.attempt"] = "\(envelope.attempt)"

        // While Apple fails for everyone, jobs wait for the probe instead of hammering it, and
        // keep their attempts: the outage is not the receipt's fault. A circuit that cannot be
        // read (Redis trouble) lets the call through; the queue will surface that error anyway.
        if case .deny(let until)? = try? lane.circuit?.permission(now: now()) {
            let spread = Double.random(in: 0...10, using: &generator)
            try lane.queue.scheduleRetry(job, updated: envelope, runAt: until.addingTimeInterval(spread))
            return .deferred
        }

        let app: AppRecord?
        do {
            app = try lane.store.app(id: envelope.appID)
        } catch {
            return try retryOrBury(job, envelope, code: "store_unavailable", message: "\(error)", calls: [], lane, logger, &generator)
        }
        guard let app else {
            return try bury(job, envelope.failed(code: "unknown_app", message: "app not registered", calls: [], at: now()), lane, logger)
        }

        let report = lane.verifier.verify(
            VerificationRequest(
                receiptData: envelope.receipt, sharedSecret: app.sharedSecret,
                excludeOldTransactions: app.excludeOldTransactions))
        let code = report.errorCode ?? report.response.map { "apple_\($0.status)" } ?? "unknown"
        if let transition = try? lane.circuit?.record(outage: report.verdict == .outage, now: now()) {
            logger.warning("Apple outage circuit changed", metadata: ["circuit.transition": "\(transition)"])
        }

        switch report.verdict {
        case .valid, .invalid:
            let record = ValidationRecord(
                envelope: envelope, status: report.verdict == .valid ? .valid : .invalid,
                environment: report.response?.environment?.lowercased(), appleStatus: report.response?.status,
                purchases: report.response?.transactions.compactMap(InAppPurchase.init(appleJSON:)) ?? [],
                latestReceipt: report.response?.latestReceipt, calls: report.calls, validatedAt: now())
            let resource: ReceiptResource
            do {
                resource = try lane.store.save(record)
            } catch {
                // Postgres down: Apple's answer is not lost for good, the job simply runs again.
                return try retryOrBury(job, envelope, code: "store_unavailable", message: "\(error)", calls: report.calls, lane, logger, &generator)
            }
            try lane.queue.acknowledge(job, result: resource.encoded())
            logger.debug("Job validated", metadata: ["receipt.status": "\(record.status.rawValue)"])
            return record.status == .valid ? .validated : .invalid
        case .configurationError:
            if ConfigurationAlarm.raiseOnce(appID: app.id) {
                // Every receipt of this app will fail the same way until someone fixes the secret:
                // say it once, loudly, not once per job.
                logger.error(
                    "Apple rejects this app's shared secret (21004): update it, then retry the dead letters",
                    metadata: ["app.id": "\(app.id)", "app.bundle_id": "\(app.bundleID)"])
            }
            let failed = envelope.failed(
                code: report.response?.status == 21004 ? "shared_secret_mismatch" : code,
                message: "Apple rejected the request: fix the app's configuration, then retry", calls: report.calls, at: now())
            return try bury(job, failed, lane, logger)
        case .transient, .outage, .switchEnvironment:
            return try retryOrBury(
                job, envelope, code: code, message: "Apple did not validate the receipt yet", calls: report.calls, lane, logger, &generator)
        }
    }

    private func retryOrBury(
        _ job: ReservedJob, _ envelope: JobEnvelope, code: String, message: String, calls: [AppleCall], _ lane: WorkerLane,
        _ logger: Logger, _ generator: inout some RandomNumberGenerator
    ) throws -> JobOutcome {
        let failed = envelope.failed(code: code, message: message, calls: calls, at: now())
        guard
            let runAt = retryPolicy.nextRun(
                attempt: failed.attempt, firstFailedAt: failed.firstFailedAt ?? now(), now: now(), using: &generator)
        else {
            return try bury(job, failed, lane, logger)
        }
        try lane.queue.scheduleRetry(job, updated: failed, runAt: runAt)
        logger.debug("Job scheduled for retry", metadata: ["job.error": "\(code)"])
        return .retried
    }

    private func bury(_ job: ReservedJob, _ failed: JobEnvelope, _ lane: WorkerLane, _ logger: Logger) throws -> JobOutcome {
        // Mark the receipt failed in Postgres when it is reachable; the dead letter is what counts.
        _ = try? lane.store.save(
            ValidationRecord(
                envelope: failed, status: .failed, environment: nil, appleStatus: failed.history.last?.appleStatus,
                purchases: [], latestReceipt: nil, calls: [], validatedAt: now()))
        try lane.queue.bury(job, updated: failed, at: now())
        logger.info("Job moved to the dead letters", metadata: ["job.error": "\(failed.errorCode ?? "")"])
        return .dead
    }
}

/// Remembers, per process, which apps' configuration errors were already reported.
enum ConfigurationAlarm {
    private static let raised = Mutex<Set<UUID>>([])

    /// True the first time it is called for `appID`.
    static func raiseOnce(appID: UUID) -> Bool {
        raised.withLock { $0.insert(appID).inserted }
    }
}
