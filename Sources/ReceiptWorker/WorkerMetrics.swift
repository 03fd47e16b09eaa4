import Foundation
import Metrics
import ReceiptCore

/// The worker's metrics (names and labels as in `ops/prometheus/metrics.yml`). Every series is
/// created up front, so each one is exported from the start with zero rather than appearing with
/// its first event, which `increase()` and `rate()` would miss.
struct WorkerMetrics: Sendable {
    private let processed: [JobOutcome: Counter]
    private let appleCalls: [AppStoreEnvironment: [StatusClass: Counter]]
    private let appleDuration: [AppStoreEnvironment: Metrics.Timer]
    private let jobLatency: [JobKind: Metrics.Timer]
    private let stageDuration: [JobKind: [JobStage: Metrics.Timer]]
    private let backendSwitches: Counter
    private let importBudgetDeferred: Counter
    private let verifyReceiptGone: Gauge
    private let verifyReceiptDeprecation: Gauge
    private let verifyReceiptSunset: Gauge
    private let notificationsStored: [String: Counter]
    private let webhookAttempts: [StatusClass: Counter]
    private let webhookDuration: Metrics.Timer
    private let consumptionAnswers: [ConsumptionOutcome: Counter]

    /// What became of a consumption request's answer job.
    enum ConsumptionOutcome: String, CaseIterable {
        /// Apple took the answer.
        case sent
        /// None was due (policy `off`, no consent, answered already).
        case skipped
        /// A dead letter: the deadline passed, or Apple refused the body.
        case dead
    }

    /// An HTTP status class, or `transport` for a call that got no answer.
    enum StatusClass: String, CaseIterable {
        case success = "2xx"
        case redirect = "3xx"
        case client = "4xx"
        case server = "5xx"
        case transport

        init(httpStatus: Int?) {
            switch httpStatus {
            case (200..<300)?: self = .success
            case (300..<400)?: self = .redirect
            case (400..<500)?: self = .client
            // 1xx is never final, so anything else answered is counted with the server's errors.
            case _?: self = .server
            case nil: self = .transport
            }
        }
    }

    /// Where a job's time in the worker goes, from its reservation to its settlement.
    enum JobStage: String, CaseIterable {
        /// Reserved → answered: the lookups before the call, the call itself and libcurl's hand-off.
        case call
        /// Answered → taken by a committer: the wait for a free committer.
        case commitWait = "commit_wait"
        /// The Postgres transaction of its batch.
        case commit
        /// The Redis settlement of its batch (the call's slot was freed at the answer).
        case settle
    }

    init(factory: any MetricsFactory) {
        processed = Dictionary(
            uniqueKeysWithValues: JobOutcome.allCases.map {
                ($0, Counter(label: "receiptq_jobs_processed_total", dimensions: [("outcome", $0.rawValue)], factory: factory))
            })
        appleCalls = Dictionary(
            uniqueKeysWithValues: AppStoreEnvironment.allCases.map { endpoint in
                let counters = StatusClass.allCases.map { status in
                    (
                        status,
                        Counter(
                            label: "receiptq_apple_calls_total", dimensions: [("endpoint", endpoint.rawValue), ("status_class", status.rawValue)],
                            factory: factory)
                    )
                }
                return (endpoint, Dictionary(uniqueKeysWithValues: counters))
            })
        appleDuration = Dictionary(
            uniqueKeysWithValues: AppStoreEnvironment.allCases.map {
                ($0, Metrics.Timer(label: "receiptq_apple_call_duration_seconds", dimensions: [("endpoint", $0.rawValue)], factory: factory))
            })
        backendSwitches = Counter(label: "receiptq_backend_switches_total", factory: factory)
        importBudgetDeferred = Counter(label: "receiptq_import_budget_deferred_total", factory: factory)
        verifyReceiptGone = Gauge(label: "receiptq_verify_receipt_gone", factory: factory)
        verifyReceiptDeprecation = Gauge(label: "receiptq_verify_receipt_deprecation_timestamp_seconds", factory: factory)
        verifyReceiptSunset = Gauge(label: "receiptq_verify_receipt_sunset_timestamp_seconds", factory: factory)
        notificationsStored = Dictionary(
            uniqueKeysWithValues: (NotificationTypes.all + ["other"]).map {
                ($0, Counter(label: "receiptq_notifications_stored_total", dimensions: [("type", $0)], factory: factory))
            })
        webhookAttempts = Dictionary(
            uniqueKeysWithValues: StatusClass.allCases.map {
                ($0, Counter(label: "receiptq_webhook_attempts_total", dimensions: [("status_class", $0.rawValue)], factory: factory))
            })
        webhookDuration = Metrics.Timer(label: "receiptq_webhook_attempt_duration_seconds", factory: factory)
        consumptionAnswers = Dictionary(
            uniqueKeysWithValues: ConsumptionOutcome.allCases.map {
                ($0, Counter(label: "receiptq_consumption_answers_total", dimensions: [("outcome", $0.rawValue)], factory: factory))
            })
        stageDuration = Dictionary(
            uniqueKeysWithValues: JobKind.allCases.map { kind in
                let timers = JobStage.allCases.map { stage in
                    (
                        stage,
                        Metrics.Timer(
                            label: "receiptq_job_stage_seconds", dimensions: [("kind", kind.rawValue), ("stage", stage.rawValue)], factory: factory)
                    )
                }
                return (kind, Dictionary(uniqueKeysWithValues: timers))
            })
        jobLatency = Dictionary(
            uniqueKeysWithValues: JobKind.allCases.map {
                ($0, Metrics.Timer(label: "receiptq_job_latency_seconds", dimensions: [("kind", $0.rawValue)], factory: factory))
            })
    }

    /// A notification a worker stored; a type Apple added since is counted as `other`.
    func notificationStored(type: String) { (notificationsStored[type] ?? notificationsStored["other"])?.increment() }

    /// A consumption request's answer job settled.
    func consumption(_ outcome: ConsumptionOutcome) { consumptionAnswers[outcome]?.increment() }

    /// An `auto` app moved to the Server API in this process.
    func backendSwitched() { backendSwitches.increment() }

    func importDeferred() { importBudgetDeferred.increment() }

    /// The deployment's view of `verifyReceipt`: gone (1/0) and the announced dates (0: none).
    func verifyReceipt(_ lifecycle: VerifyReceiptLifecycle) {
        verifyReceiptGone.record(lifecycle.goneSince == nil ? 0 : 1)
        verifyReceiptDeprecation.record(lifecycle.deprecation?.timeIntervalSince1970 ?? 0)
        verifyReceiptSunset.record(lifecycle.sunset?.timeIntervalSince1970 ?? 0)
    }

    /// One job's calls to Apple (production, then sandbox after a 21007, …).
    func record(_ calls: [AppleCall]) {
        for call in calls {
            appleCalls[call.endpoint]?[StatusClass(httpStatus: call.httpStatus)]?.increment()
            appleDuration[call.endpoint]?.recordMilliseconds(call.latencyMs)
        }
    }

    /// One webhook delivery attempt, by the endpoint's status class (`transport`: no answer).
    func delivered(_ report: WebhookReport) {
        webhookAttempts[StatusClass(httpStatus: report.httpStatus)]?.increment()
        webhookDuration.recordMilliseconds(report.latencyMs)
    }

    /// How long one job spent in a stage (monotonic nanoseconds).
    func stage(_ stage: JobStage, kind: JobKind?, nanoseconds: UInt64) {
        stageDuration[kind ?? .validate]?[stage]?.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    /// A settled job. Only a job that is done (validated, invalid or dead) has a latency: a retried
    /// or deferred one is still on its way.
    func settled(_ outcome: JobOutcome, envelope: JobEnvelope?, at now: Date) {
        processed[outcome]?.increment()
        guard let envelope, outcome == .validated || outcome == .invalid || outcome == .dead else { return }
        let seconds = max(0, now.timeIntervalSince(envelope.enqueuedAt))
        jobLatency[envelope.kind]?.recordNanoseconds(Int64(seconds * 1e9))
    }
}
