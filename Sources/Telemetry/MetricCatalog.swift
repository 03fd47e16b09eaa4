import ReceiptCore

/// The metrics receiptq exports: the Swift side of `ops/prometheus/metrics.yml`, which alerts and
/// the Grafana dashboard are checked against. A test compares the two, and another compares a live
/// scrape of every role with this table.
public enum MetricCatalog {
    /// What Prometheus is told about a metric.
    public enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    /// One metric: its name, type, help text, label names and, for histograms, the buckets.
    public struct Entry: Sendable {
        public var name: String
        public var kind: Kind
        public var help: String
        /// Each label's whole set of values; nil when the code bounds it without a fixed list
        /// (route patterns, methods, status codes).
        public var labels: [String: [String]?]
        /// Upper bounds in seconds (histograms only).
        public var buckets: [Double]

        init(_ name: String, _ kind: Kind, _ help: String, labels: [String: [String]?] = [:], buckets: [Double] = []) {
            self.name = name
            self.kind = kind
            self.help = help
            self.labels = labels
            self.buckets = buckets
        }
    }

    /// The prefix of every name receiptq exports.
    public static let namespace = "receiptq_"

    public static let queueDepth = "receiptq_queue_depth"
    public static let retryJobs = "receiptq_retry_jobs"
    public static let deadJobs = "receiptq_dead_jobs"
    public static let liveWorkers = "receiptq_live_workers"
    public static let jobsProcessed = "receiptq_jobs_processed_total"
    public static let appleCalls = "receiptq_apple_calls_total"
    public static let appleCallDuration = "receiptq_apple_call_duration_seconds"
    public static let serverAPICalls = "receiptq_server_api_calls_total"
    public static let jobLatency = "receiptq_job_latency_seconds"
    public static let jobStage = "receiptq_job_stage_seconds"
    public static let circuitState = "receiptq_circuit_state"
    public static let verifyReceiptGone = "receiptq_verify_receipt_gone"
    public static let verifyReceiptDeprecation = "receiptq_verify_receipt_deprecation_timestamp_seconds"
    public static let verifyReceiptSunset = "receiptq_verify_receipt_sunset_timestamp_seconds"
    public static let backendSwitches = "receiptq_backend_switches_total"
    public static let importItems = "receiptq_import_items_total"
    public static let importBudgetDeferred = "receiptq_import_budget_deferred_total"
    public static let redisReplicationTimeouts = "receiptq_redis_replication_timeouts_total"
    public static let redisReplicas = "receiptq_redis_replicas"
    public static let redisReplicaLagSeconds = "receiptq_redis_replica_lag_seconds"
    public static let redisReplicaLagBytes = "receiptq_redis_replica_lag_bytes"
    public static let repollsDue = "receiptq_repolls_due"
    public static let repollsEnqueued = "receiptq_repolls_enqueued_total"
    public static let repolls = "receiptq_repolls_total"
    public static let retentionRowsDeleted = "receiptq_retention_rows_deleted_total"
    public static let retentionPartitionsDropped = "receiptq_retention_partitions_dropped_total"
    public static let retentionPartitionsCreated = "receiptq_retention_partitions_created_total"
    public static let retentionLastRun = "receiptq_retention_last_run_timestamp_seconds"
    public static let notificationsReceived = "receiptq_notifications_received_total"
    public static let notificationsStored = "receiptq_notifications_stored_total"
    public static let notificationAppsSilent = "receiptq_notification_apps_silent"
    public static let revenueActiveSubscriptions = "receiptq_revenue_active_subscriptions"
    public static let revenueMRR = "receiptq_revenue_mrr_milli"
    public static let ocspChecks = "receiptq_ocsp_checks_total"
    public static let webhookAttempts = "receiptq_webhook_attempts_total"
    public static let consumptionAnswers = "receiptq_consumption_answers_total"
    public static let authAttempts = "receiptq_auth_attempts_total"
    public static let webhookAttemptDuration = "receiptq_webhook_attempt_duration_seconds"
    public static let webhookDeliveriesQueued = "receiptq_webhook_deliveries_queued_total"
    public static let webhookDeliveriesRequeued = "receiptq_webhook_deliveries_requeued_total"
    public static let webhookEndpointsPaused = "receiptq_webhook_endpoints_paused"
    public static let httpRequests = "receiptq_http_requests_total"
    public static let httpRequestDuration = "receiptq_http_request_duration_seconds"
    public static let httpConnections = "receiptq_http_connections"
    public static let httpConnectionsRefused = "receiptq_http_connections_refused_total"
    public static let httpConnectionsTimedOut = "receiptq_http_connections_timed_out_total"
    /// The listeners `listener` names: serve's API port and any role's `METRICS_PORT`.
    public static let httpListeners = ["api", "metrics"]

    /// Every metric, in `metrics.yml`'s order.
    public static let entries: [Entry] = [
        Entry(
            queueDepth, .gauge, "Jobs ready in a queue list ({rq}:queue:validate, :repoll, :notification, :webhook, :import).",
            labels: ["queue": ["validate", "repoll", "notification", "webhook", "import"]]),
        Entry(retryJobs, .gauge, "Jobs waiting for their backoff in {rq}:retry."),
        Entry(deadJobs, .gauge, "Dead letters in {rq}:dead."),
        Entry(liveWorkers, .gauge, "Worker processes whose heartbeat is alive."),
        Entry(
            jobsProcessed, .counter, "Jobs settled by the workers, by outcome.",
            labels: ["outcome": ["validated", "invalid", "retried", "dead", "deferred"]]),
        Entry(
            appleCalls, .counter, "Calls to Apple's verifyReceipt, by endpoint and HTTP status class (transport = no answer).",
            labels: ["endpoint": ["production", "sandbox"], "status_class": ["2xx", "3xx", "4xx", "5xx", "transport"]]),
        Entry(
            serverAPICalls, .counter,
            "Calls sent to the App Store Server API, by app (bundle id), endpoint, purpose and environment.",
            labels: [
                "app": nil,
                "endpoint": ServerAPIEndpoint.allCases.map(\.rawValue), "purpose": ApplePurpose.allCases.map(\.rawValue),
                "environment": AppStoreEnvironment.allCases.map(\.rawValue),
            ]),
        Entry(
            appleCallDuration, .histogram, "Duration of one call to Apple.", labels: ["endpoint": ["production", "sandbox"]],
            // Apple answers in 100 ms to 2 s; the request timeout is 30 s by default.
            buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30]),
        Entry(
            jobLatency, .histogram, "From enqueue to the settled job.", labels: ["kind": ["validate", "repoll", "notification", "webhook"]],
            // From the synchronous wait (2 s) to a job that retried through an outage of hours.
            buckets: [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 21_600, 86_400]),
        Entry(
            jobStage, .histogram,
            "A job's time in the worker by stage: call (reserved to answered), commit_wait, commit (its batch's Postgres transaction), settle (its batch's Redis settlement).",
            labels: ["kind": ["validate", "repoll", "notification", "webhook"], "stage": ["call", "commit_wait", "commit", "settle"]],
            // From a millisecond's commit to a call at the request timeout.
            buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]),
        Entry(circuitState, .gauge, "The Apple outage circuit (0 closed, 1 half-open, 2 open)."),
        Entry(
            verifyReceiptGone, .gauge,
            "1 once verifyReceipt answered 404/410 on a run of calls across the deployment, else 0."),
        Entry(
            verifyReceiptDeprecation, .gauge,
            "The deprecation date verifyReceipt's Deprecation header announced (UNIX seconds; 0 while none)."),
        Entry(
            verifyReceiptSunset, .gauge, "The sunset date verifyReceipt's RFC 8594 Sunset header announced (UNIX seconds; 0 while none)."),
        Entry(
            backendSwitches, .counter,
            "Apps on the auto backend this process moved to the App Store Server API once verifyReceipt was retired."),
        Entry(
            importItems, .counter, "Items of bulk-import batches answered by serve, by outcome (accepted, duplicate, fraud, invalid, unavailable).",
            labels: ["result": ["accepted", "duplicate", "fraud", "invalid", "unavailable"]]),
        Entry(
            importBudgetDeferred, .counter,
            "Bulk imports' validations sent back to the retry set because their app's import budget (IMPORT_RATE_PER_SECOND) was spent for the next seconds."
        ),
        Entry(
            redisReplicationTimeouts, .counter,
            "Intake pipelines (and re-poll or webhook enqueues) whose writes REDIS_MIN_REPLICAS_ACK replicas did not acknowledge within REDIS_REPLICA_ACK_TIMEOUT_MS (their requests answered 503; the enqueues are retried)."
        ),
        Entry(redisReplicas, .gauge, "Replicas connected to the Redis primary and online."),
        Entry(
            redisReplicaLagSeconds, .gauge,
            "The longest time since one of the Redis primary's replicas acknowledged the replication stream, in seconds."),
        Entry(
            redisReplicaLagBytes, .gauge,
            "The most bytes of the Redis primary's replication stream one of its replicas has not acknowledged."),
        Entry(repollsDue, .gauge, "Subscriptions whose next poll is due and not yet queued."),
        Entry(repollsEnqueued, .counter, "Re-poll jobs queued by the schedulers."),
        Entry(
            repolls, .counter,
            "Due re-polls per app: made (queued) or skipped because Server Notifications V2 cover the subscription.",
            labels: ["app": nil, "outcome": ["made", "skipped"]]),
        Entry(
            retentionRowsDeleted, .counter, "Rows (and dead letters) the retention step deleted, by kind of data.",
            labels: ["kind": RetentionKind.allCases.map(\.rawValue)]),
        Entry(
            retentionPartitionsDropped, .counter, "Time partitions the retention step dropped whole, by kind of data.",
            labels: ["kind": ["apple_call_attempts", "audit_log"]]),
        Entry(retentionPartitionsCreated, .counter, "Time partitions the retention step created ahead of their rows."),
        Entry(retentionLastRun, .gauge, "When the retention step last ran to its end on this replica (Unix seconds)."),
        Entry(
            notificationsReceived, .counter,
            "App Store Server Notifications posted to serve, by answer (accepted, duplicate, forged, unauthorized, invalid, not_found, unavailable).",
            labels: ["result": ["accepted", "duplicate", "forged", "unauthorized", "invalid", "not_found", "unavailable"]]),
        Entry(
            notificationAppsSilent, .gauge,
            "Apps with a notification URL issued over a day ago that have stored no notification in the last day (schedule, every history sweep)."),
        Entry(
            revenueActiveSubscriptions, .gauge,
            "Subscriptions entitling today, by app (bundle id) and currency (serve, from the revenue rollup at each scrape).",
            labels: ["app": nil, "currency": nil]),
        Entry(
            revenueMRR, .gauge,
            "Monthly recurring revenue today in milli-units, by app (bundle id) and currency (serve, from the revenue rollup).",
            labels: ["app": nil, "currency": nil]),
        Entry(
            notificationsStored, .counter,
            "Notifications a worker stored (applied, stale or recorded), by Apple's type (other: a type not documented yet).",
            labels: ["type": NotificationTypes.all + ["other"]]),
        Entry(
            ocspChecks, .counter,
            "OCSP queries about Apple's JWS signing certificates, by outcome (answers are cached until their nextUpdate).",
            labels: ["outcome": ["good", "revoked", "unknown", "unreachable", "invalid_response", "no_responder"]]),
        Entry(
            authAttempts, .counter,
            "Credentials presented to the API, by door and outcome (granted, refused, forbidden = a lesser role, throttled = too many failures).",
            labels: [
                "door": ["admin_api", "dashboard_login", "softphone", "client_token", "notification_token"],
                "outcome": ["granted", "refused", "forbidden", "throttled"],
            ]),
        Entry(
            webhookAttempts, .counter, "Webhook delivery attempts by the workers, by the endpoint's HTTP status class (transport = no answer).",
            labels: ["status_class": ["2xx", "3xx", "4xx", "5xx", "transport"]]),
        Entry(
            consumptionAnswers, .counter,
            "Answers to Apple's CONSUMPTION_REQUEST settled by the workers: sent, skipped (policy off, no consent, answered) or dead.",
            labels: ["outcome": ["sent", "skipped", "dead"]]),
        Entry(
            webhookAttemptDuration, .histogram, "Duration of one webhook delivery attempt.",
            // A receiver answers in milliseconds to seconds; the delivery timeout is 10 s by default.
            buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30]),
        Entry(webhookDeliveriesQueued, .counter, "Webhook deliveries the dispatchers queued (each once, when its user's earlier ones settled)."),
        Entry(
            webhookDeliveriesRequeued, .counter,
            "Webhook deliveries queued again because Redis had lost their jobs (a failover or restart after the dispatcher's commit)."),
        Entry(
            webhookEndpointsPaused, .gauge,
            "Webhook endpoints paused (failing for a day, or by an operator): their events wait (schedule, every 15 s)."),
        Entry(
            httpRequests, .counter, "HTTP requests answered by serve.",
            labels: ["route": nil, "method": nil, "status": nil]),
        Entry(
            httpRequestDuration, .histogram, "Duration of an HTTP request answered by serve.",
            labels: ["route": nil, "method": nil],
            buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]),
        Entry(httpConnections, .gauge, "Open client connections of an HTTP listener.", labels: ["listener": httpListeners]),
        Entry(
            httpConnectionsRefused, .counter, "Connections an HTTP listener closed on accept because HTTP_MAX_CONNECTIONS were open.",
            labels: ["listener": httpListeners]),
        Entry(
            httpConnectionsTimedOut, .counter,
            "Connections an HTTP listener closed because the client was too slow: header (HTTP_HEADER_TIMEOUT_MS), body (HTTP_BODY_TIMEOUT_MS and HTTP_BODY_MIN_BYTES_PER_SECOND) or idle between requests (HTTP_IDLE_TIMEOUT_MS).",
            labels: ["listener": httpListeners, "phase": ["header", "body", "idle"]]),
    ]

    /// The entry for a name, nil for a name receiptq does not export.
    public static func entry(_ name: String) -> Entry? {
        entries.first { $0.name == name }
    }
}
