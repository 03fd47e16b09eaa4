/// receiptq's Redis key schema, in one place (DESIGN.md "Redis keys"): every key the adapter reads,
/// writes or hands to a script (``RedisScripts``) is built here, and nowhere else.
///
/// Every key carries the `{rq}` hash tag (or the configured prefix) so that the multi-key Lua
/// moves stay legal on Redis Cluster.
public struct RedisKeys: Sendable, Equatable {
    /// The prefix, `{rq}` by default; tests use a unique one per test.
    public var prefix: String
    /// How long an import's progress is kept after its last activity, in seconds
    /// (`RETENTION_IMPORT_RUNS_DAYS`, 7 days by default); 0 keeps it forever.
    public var importRunRetention: Int64

    /// Creates the schema for `prefix`.
    public init(prefix: String = "{rq}", importRunRetention: Int64 = 7 * 86_400) {
        self.prefix = prefix
        self.importRunRetention = max(0, importRunRetention)
    }

    /// Ready jobs of `kind`: LPUSH to add, BLMOVE RIGHT → LEFT to take.
    public func queue(_ kind: String) -> String { "\(prefix):queue:\(kind)" }
    /// Jobs held by one worker lane.
    public func processing(_ worker: String) -> String { "\(prefix):processing:\(worker)" }
    /// A worker lane's heartbeat hash (with TTL).
    public func worker(_ worker: String) -> String { "\(prefix):worker:\(worker)" }
    /// Every worker lane that ever registered, for the janitor.
    public var workers: String { "\(prefix):workers" }
    /// Jobs waiting in backoff (score = run at, ms).
    public var retry: String { "\(prefix):retry" }
    /// Dead letters (score = died at, ms).
    public var dead: String { "\(prefix):dead" }
    /// The pub/sub channel of one ingestion node: the worker publishes there the result of a job the
    /// node is waiting for (`JobEnvelope.replyTo`).
    public func results(_ node: String) -> String { "\(prefix):results:\(node)" }
    /// Idempotency: the id under which an app's receipt (by SHA-256) was queued, for the window.
    public func idempotency(app: String, receiptSHA256: String) -> String { "\(prefix):idem:\(app):\(receiptSHA256)" }
    /// Failed authentications at one door from one client address (a hash: failures, closed until ms; TTL).
    public func guessingAddress(_ door: String, _ address: String) -> String { "\(prefix):auth:addr:\(door):\(address)" }
    /// Failed authentications against one account of a namespace (`operator`, `softphone`).
    public func guessingAccount(_ namespace: String, _ account: String) -> String { "\(prefix):auth:acct:\(namespace):\(account)" }
    /// The pending resource of a queued receipt, until Postgres has it.
    public func pending(_ id: String) -> String { "\(prefix):pending:\(id)" }
    /// The activity of one minute (`minute` = Unix seconds / 60), across every worker: a hash of
    /// counters, `o.<ActivityOutcome>` and `f.<FailureClass>`, incremented in each batch's settle
    /// transaction and kept two hours (the dashboard charts the last one).
    public func activity(minute: Int64) -> String { "\(prefix):stats:\(minute)" }
    /// One bulk import's progress (``ImportRun``): a hash of counters and times (ms), kept
    /// ``importRunRetention`` after its last batch or settlement (no expiry when that is 0).
    public func importRun(_ id: String) -> String { "\(prefix):import:run:\(id)" }
    /// Every import's id, scored by its last batch or settlement (ms): the dashboard lists the recent ones.
    public var importRuns: String { "\(prefix):import:runs" }
    /// One app's import budget (`IMPORT_RATE_PER_SECOND`), a token bucket like the Server API's.
    public func importBucket(app: String) -> String { "\(prefix):import:bucket:\(app)" }

    /// The re-poll rate budget shared by every scheduler replica (a token bucket).
    public var repollBudget: String { "\(prefix):repoll:budget" }
    /// Set when the webhook delivery `deliveryID` was queued: a dispatcher that crashed before its
    /// commit does not queue it twice.
    public func webhookMarker(deliveryID: Int64) -> String { "\(prefix):webhook:queued:\(deliveryID)" }
    /// Set when the re-poll of one subscription at one poll counter was queued: a repeated enqueue is dropped.
    public func repollMarker(app: String, environment: String, originalTransactionID: String, pollSequence: Int) -> String {
        "\(prefix):repoll:queued:\(app):\(environment):\(originalTransactionID):\(pollSequence)"
    }
    /// How many times the janitor gave job `id` back after its worker died (a week's TTL): past
    /// `RedisMaintenance.maxRecoveries` the job is taken for a poison job and buried.
    public func recoveries(_ id: String) -> String { "\(prefix):recoveries:\(id)" }

    /// The outage circuit's state hash: `open_until` (ms; absent while closed) and `failed_probes`.
    public var circuitState: String { "\(prefix):circuit:state" }
    /// The outage circuit's probe lease: `"<lane token> <lease end, ms>"`, held by the one prober.
    public var circuitProbe: String { "\(prefix):circuit:probe" }
    /// Calls (`c`) and outages (`f`) of one window bucket (the Unix second by default), with a TTL.
    public func circuitCalls(bucket: Int64) -> String { "\(prefix):circuit:calls:\(bucket)" }

    /// One app's Server API token bucket for one endpoint and environment: `t` tokens, `ts` last
    /// refill (ms).
    public func serverAPIBucket(app: String, environment: String, endpoint: String) -> String {
        "\(prefix):serverapi:bucket:\(app):\(environment):\(endpoint)"
    }
    /// An app's granted Server API calls in one UTC hour (`hour`: seconds since 1970 ÷ 3600): a
    /// field per endpoint (the hour's total) and per `endpoint|purpose`.
    public func serverAPIHour(app: String, environment: String, hour: Int64) -> String {
        "\(prefix):serverapi:calls:\(app):\(environment):h:\(hour)"
    }
    /// The same for one minute (`minute`: seconds since 1970 ÷ 60), kept three minutes.
    public func serverAPIMinute(app: String, environment: String, minute: Int64) -> String {
        "\(prefix):serverapi:calls:\(app):\(environment):m:\(minute)"
    }
    /// Set after a `429`: the app's calls wait until this time (ms).
    public func serverAPIPause(app: String, environment: String) -> String { "\(prefix):serverapi:pause:\(app):\(environment)" }

    /// `verifyReceipt`'s lifecycle across the deployment: `run` (404/410s in a row), `gone_since`,
    /// `deprecation`, `sunset` (ms).
    public var verifyReceiptLifecycle: String { "\(prefix):verifyreceipt:lifecycle" }
}
