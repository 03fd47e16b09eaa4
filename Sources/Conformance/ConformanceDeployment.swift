import Curl
import DevTools
import Foundation
import Hiredis
import Libpq
import Logging
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServiceLifecycle
import Telemetry

/// A whole receiptq deployment in one process, as a conformance run plays against it: every role
/// of `receiptq all` (API, workers, scheduler, webhook dispatcher, the notification history sweep)
/// on the run's simulated clock (the answers' dates, and the subscriptions' polls: the worker
/// plans them on it and the scheduler claims them on it, ticking every 20 ms so that the polls a
/// jump made due are queued at once; retries, the janitor and heartbeats keep the machine's
/// pace), an in-process mock App Store on the same clock notifying it (unless the app has no
/// notification URL: ``notifications``), a
/// webhook receiver as the customers' backend, and a fresh app with the conformance catalogue
/// defined. `receiptq conformance` and the conformance tests both run this one.
///
/// It reads Redis and Postgres from the environment it is given, as `receiptq all` does, and keeps
/// to what it creates: a database of its own on that Postgres server (`receiptq_conformance_<id>`,
/// created, migrated, and dropped by ``stop()``) and a Redis key prefix of its own (deleted by
/// ``stop()``).
///
/// Started with a worker executable (``Faults/workerKilled``), it also runs one worker as a
/// process of its own, on the same simulated clock through a ``ClockFile``, for the driver to
/// kill (``killWorker()``); its in-process scheduler is the janitor.
public final class ConformanceDeployment: ConformanceTarget {
    /// The database the run uses, on the configured Postgres server.
    public let database: String
    public let configuration: AppConfiguration
    public let app: AppRecord
    public let receiver: WebhookReceiver
    public let apiPort: Int
    private let server: PostgresConfiguration
    private let mockServer: RunningMockAppStore
    private let token: String
    private let client: HTTPClient
    private let trustDirectory: URL
    private let group: ServiceGroup
    private let task: Task<Void, any Error>
    private let receiverTask: Task<Void, any Error>
    private let killedWorker: KilledWorker?
    private let clock: SimulatedClock
    private let metrics: PrometheusExporter
    /// Whether the app receives Server Notifications V2: false, it has no notification URL (the
    /// mock has no target for its bundle, the app no notification token, so the history sweep
    /// skips it too) and hears of Apple's changes only by its re-polls and devices' posts.
    public let notifications: Bool

    public var mock: MockAppStoreState { mockServer.state }
    public var bundleID: String { app.bundleID }
    public var historySweepInterval: TimeInterval { Self.historySweepInterval }
    /// The history sweep's interval the deployment sets (`NOTIFICATION_HISTORY_INTERVAL_SECONDS`).
    public static let historySweepInterval: TimeInterval = 3_600

    /// How long ``settle()`` and ``awaitEvents(_:)`` wait, counted in polls of 50 ms (a loaded
    /// machine must not use it up while the process is not even scheduled).
    public static let patience: Duration = .seconds(60)

    /// Starts the deployment.
    /// - Parameters:
    ///   - environment: where Redis and Postgres are (`REDIS_*`, `POSTGRES_*`, as `receiptq all`
    ///     reads them); the deployment sets its own listeners, mock App Store, keys and trust roots
    ///     over it.
    ///   - clock: the run's simulated clock.
    ///   - workerExecutable: `receiptq`, to run one worker as a process of its own that
    ///     ``killWorker()`` kills (nil: every role in process).
    ///   - notifications: give the app a notification URL (false: ``notifications``).
    ///   - logger: the roles' logger (its level decides how much they say).
    public static func start(
        environment: [String: String], clock: SimulatedClock, workerExecutable: URL? = nil, notifications: Bool = true, logger: Logger
    ) async throws -> ConformanceDeployment {
        let id = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let database = "receiptq_conformance_\(id)"
        let server = try AppConfiguration(environment: environment).postgres
        let admin = try PostgresConnection(configuration: server, label: "conformance")
        defer { admin.close() }
        try admin.execute("CREATE DATABASE \(database)")
        var started: [@Sendable () async -> Void] = [{ dropDatabase(database, on: server) }]
        do {
            let trust = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-conformance-\(id)")
            try FileManager.default.createDirectory(at: trust, withIntermediateDirectories: true)
            started.append { try? FileManager.default.removeItem(at: trust) }
            // The mock's Apple-shaped chain, the only root the deployment trusts.
            let authority = try MockAppleJWSAuthority.generate()
            try authority.root.pem.write(to: trust.appendingPathComponent("jws-root.pem"), atomically: true, encoding: .utf8)
            let mockServer = try await MockAppStore.start(state: MockAppStoreState(authority: authority, now: clock.closure), logger: logger)
            started.append { await mockServer.stop() }
            let secretsKey = SecureRandom.bytes(32)
            // As the tests' whole system is started (TestSystem), on a database and a key prefix of its own.
            var overrides = mockServer.settings.merging([
                "HTTP_HOST": "127.0.0.1", "HTTP_PORT": "0", "POSTGRES_DB": database, "REDIS_KEY_PREFIX": "{rqc-\(id)}",
                "RECEIPTQ_SECRETS_KEY": Data(secretsKey).base64EncodedString(), "RECEIPTQ_TRUST_ROOTS_DIR": trust.path,
                "APPSTORE_REQUEST_TIMEOUT_MS": "5000", "WORKER_CONCURRENCY": "4", "API_SYNC_WAIT_MS": "20000", "RETRY_BASE_MS": "200",
                // The driver posts one device's step at a time and waits for its answer: the
                // committers' linger (20 ms, to batch a busy worker's results) was most of a step.
                "WORKER_COMMIT_LINGER_MS": "2",
                // Counted on the simulated clock: a lost notification is found within an hour of simulated time.
                "NOTIFICATION_HISTORY_INTERVAL_SECONDS": String(Int(historySweepInterval)),
                // After each jump of the clock the polls it made due are queued within a tick: at
                // the default second, a run's thousands of settles each waited for one.
                "SCHEDULER_TICK_MS": String(schedulerTickMilliseconds),
                // An idle worker blocks on the validation queue and looks at the notifications and
                // webhook queues when the wait ends: at the default 100 ms, a settle waited for a
                // notification and then its webhook, half of a run's time (22.6 of 37 s for 200
                // customers over 90 days without faults; 10.7 s at 10 ms).
                "WORKER_IDLE_WAIT_MS": "10",
            ]) { _, own in own }
            // A killed worker's jobs come back within seconds, not the default's 30.
            if workerExecutable != nil { overrides["WORKER_HEARTBEAT_TTL_SECONDS"] = String(KilledWorker.heartbeatTTLSeconds) }
            let settings = environment.merging(overrides) { _, own in own }
            let configuration = try AppConfiguration(environment: settings)
            started.append { deleteKeys(configuration) }
            try ReceiptQueueApp.migrate(configuration, logger: logger)

            let (app, token) = try register(configuration, secretsKey: secretsKey, mock: mockServer.state)
            let receiver = WebhookReceiver(secret: "pending")
            // Quiet: its server's stop (a cancelled task) is no error of the run.
            var quiet = logger
            quiet.logLevel = .critical
            let (url, receiverTask) = try await receiver.start(logger: quiet)
            started.append { receiverTask.cancel() }
            try connect(app, configuration: configuration, secretsKey: secretsKey, receiver: receiver, url: url)

            let (ports, continuation) = AsyncStream<Int>.makeStream()
            let metrics = PrometheusExporter()
            // Its own app only, though the database is its own too: the roles are what a test
            // sharing a database runs. The subscriptions' polls on the simulated clock (`repollClock`):
            // a jump makes the polls it passed due, as the time would in a real deployment.
            let roles = try ReceiptQueueApp.makeRoles(
                configuration, onlyApps: [app.id], now: clock.closure, repollClock: clock.closure, metrics: metrics, logger: logger
            ) { port in
                continuation.yield(port)
                continuation.finish()
            }
            let group = ServiceGroup(services: roles.services, gracefulShutdownSignals: [], logger: logger)
            let task = Task(executorPreference: ServerThreads.shared) { try await group.run() }
            started.append {
                await group.triggerGracefulShutdown()
                _ = try? await task.value
            }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next(), port > 0 else { throw DeploymentError.apiDidNotStart }
            if notifications {
                // The API's port is known only now: the mock notifies it at the app's URL, as Apple would.
                let notificationToken = try withAdmin(configuration) { try AppAdmin(connection: $0).rotateNotificationToken(appID: app.id) }
                mockServer.state.notifications.setTarget(
                    .init(url: "http://127.0.0.1:\(port)/apple/notifications/\(app.name)/\(notificationToken)", version: "v2", password: nil),
                    bundleID: app.bundleID)
            }
            var killedWorker: KilledWorker?
            if let workerExecutable {
                let clockFile = trust.appendingPathComponent("clock")
                clock.publish(to: try ClockFile.Writer(path: clockFile.path))
                // Only errors: its routine lines would bury the run's table.
                let worker = try KilledWorker(
                    executable: workerExecutable, environment: settings.merging(["LOG_LEVEL": "error"]) { _, own in own },
                    clockFile: clockFile, log: trust.appendingPathComponent("worker.log"))
                started.append { await worker.stop() }
                // Loud, not a run whose kills silently never happen (a receiptq not built, a bad setting).
                try await worker.awaitStarted(timeout: .seconds(60))
                killedWorker = worker
            }
            return ConformanceDeployment(
                database: database, configuration: configuration, app: app, receiver: receiver, apiPort: port, server: server,
                mockServer: mockServer, token: token, client: try HTTPClient(options: CurlOptions(), lanes: 8), trustDirectory: trust,
                group: group, task: task, receiverTask: receiverTask, killedWorker: killedWorker, clock: clock, metrics: metrics,
                notifications: notifications)
        } catch {
            for stop in started.reversed() { await stop() }
            throw error
        }
    }

    private init(
        database: String, configuration: AppConfiguration, app: AppRecord, receiver: WebhookReceiver, apiPort: Int,
        server: PostgresConfiguration, mockServer: RunningMockAppStore, token: String, client: HTTPClient, trustDirectory: URL,
        group: ServiceGroup, task: Task<Void, any Error>, receiverTask: Task<Void, any Error>, killedWorker: KilledWorker?,
        clock: SimulatedClock, metrics: PrometheusExporter, notifications: Bool
    ) {
        self.database = database
        self.configuration = configuration
        self.app = app
        self.receiver = receiver
        self.apiPort = apiPort
        self.server = server
        self.mockServer = mockServer
        self.token = token
        self.client = client
        self.trustDirectory = trustDirectory
        self.group = group
        self.task = task
        self.receiverTask = receiverTask
        self.killedWorker = killedWorker
        self.clock = clock
        self.metrics = metrics
        self.notifications = notifications
    }

    /// The scheduler's tick the deployment sets (`SCHEDULER_TICK_MS`).
    public static let schedulerTickMilliseconds = 20

    /// Stops every role, the mock and the receiver, and removes what the run created: its
    /// database, its Redis keys, its trust directory.
    public func stop() async {
        await killedWorker?.stop()
        await group.triggerGracefulShutdown()
        _ = try? await task.value
        await client.shutdown()
        receiverTask.cancel()
        await mockServer.stop()
        Self.deleteKeys(configuration)
        Self.dropDatabase(database, on: server)
        try? FileManager.default.removeItem(at: trustDirectory)
    }

    // MARK: ConformanceTarget

    public func postTransaction(_ jws: String, user: String) async throws -> Int {
        let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string(user)]).encodedText
        return try await send("POST", "/client/transactions", body: body).status
    }

    public func customer(_ user: String) async throws -> JSONValue {
        let (status, answer) = try await send("GET", "/client/customers/\(user)")
        guard status == 200, let answer else { throw ConformanceError.postRefused(user: user, status: status) }
        return answer
    }

    /// Also waits until no re-poll is due at the simulated now (as it was when asked) and not
    /// yet queued, counted with the scheduler's own query: a jump of the clock makes polls due,
    /// and an idle queue before the scheduler's next tick claimed them is not settled. The count
    /// comes first: once it is zero every poll due then is in Redis (a claim commits after its
    /// enqueue), and the empty queues that follow mean answered.
    public func settle() async throws {
        let now = clock.now()
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "conformance-settle")
        defer { postgres.close() }
        let schedule = PostgresSubscriptionSchedule(connection: postgres, apps: [app.id])
        let settled = try await Self.poll {
            try schedule.countDue(now: now, limit: 1) == 0 && mock.notifications.allDelivered && withJobs { try $0.counts().isEmpty }
        }
        if !settled {
            throw DeploymentError.didNotSettle(
                held: try withJobs { try $0.counts() }, jobs: try withJobs { try $0.inHands() },
                duePolls: try schedule.countDue(now: now, limit: 1_000_000))
        }
    }

    public var repollPolicy: RepollPolicy { configuration.scheduler.repollPolicy }

    public func nextPollDue() async throws -> Date? {
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "conformance-polls")
        defer { postgres.close() }
        return try await postgres.query("SELECT min(next_poll_at) AS due FROM subscriptions WHERE app_id = \(app.id)").rows.first?.date("due")
    }

    /// The re-polls the deployment's scheduler queued (`made`) and skipped because Server
    /// Notifications cover their subscription (`skipped`), from its `receiptq_repolls_total`.
    public var repolls: (made: Int, skipped: Int) {
        let lines = String(decoding: metrics.exposition(), as: UTF8.self).split(separator: "\n").filter {
            $0.hasPrefix("receiptq_repolls_total{")
        }
        func sum(_ outcome: String) -> Int {
            lines.filter { $0.contains("outcome=\"\(outcome)\"") }.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }
                .reduce(0) { $0 + Int($1) }
        }
        return (sum("made"), sum("skipped"))
    }

    /// Also waits until no webhook delivery is open: a webhook is written with its event
    /// (pending) and queued by the dispatcher later, so an idle queue can come before it, and a
    /// backend that received an unexpected event already has its count while an expected one is
    /// still on its way. Only here, before the stream is compared: waiting for the dispatcher
    /// after every window would triple a run's time.
    public func awaitEvents(_ counts: [String: Int]) async throws {
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "conformance-events")
        defer { postgres.close() }
        _ = try await Self.poll {
            let open = try await postgres.query("SELECT count(*) AS open FROM webhook_deliveries WHERE status IN ('pending', 'queued')")
            guard open.rows.first?.int("open") == 0 else { return false }
            let received = receivedEvents().byUser
            if counts.allSatisfy({ user, count in received[user, default: []].count >= count }) { return true }
            // Every event the deployment made for a user has arrived: what `counts` still lacks was
            // never made (a polled app cannot hear each change), and waiting brings nothing more.
            // Without this the run's end waited out the whole patience (60 s) whenever an event
            // was missing, most of a no-notification run's time.
            let made = try await postgres.query(
                "SELECT count(*) AS made FROM events WHERE app_id = \(app.id) AND user_identifier IS NOT NULL")
            return made.rows.first?.int("made") == received.values.reduce(0) { $0 + $1.count }
        }
    }

    public func stored(notifications uuids: Set<String>) async throws -> Set<String> {
        guard !uuids.isEmpty else { return [] }
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "conformance-notifications")
        defer { postgres.close() }
        return try Self.stored(uuids, on: postgres)
    }

    public func awaitStored(notifications uuids: Set<String>) async throws {
        guard !uuids.isEmpty else { return }
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "conformance-notifications")
        defer { postgres.close() }
        _ = try await Self.poll { try Self.stored(uuids, on: postgres).count == uuids.count }
    }

    private static func stored(_ uuids: Set<String>, on postgres: PostgresConnection) throws -> Set<String> {
        let rows = try postgres.query(
            "SELECT notification_uuid FROM notifications WHERE notification_uuid = ANY(\(PostgresBinaryArray(texts: uuids))::text[])")
        return Set(rows.rows.compactMap { $0.string("notification_uuid") })
    }

    /// How long ``killWorker()`` waits for the worker process to hold a job (when it gets one of
    /// a post's jobs at all, it held it within a fifth of a second here).
    public static let killPatience: Duration = .milliseconds(500)

    public func killWorker() async throws -> Int? {
        guard let killedWorker else { throw DeploymentError.noWorkerProcess }
        return try await killedWorker.kill(within: Self.killPatience)
    }

    public func receivedEvents() -> ReceivedEvents {
        ReceivedEvents(
            deliveries: receiver.deliveries.compactMap { delivery in
                guard delivery.status == 200, let user = delivery.event?["user_identifier"]?.stringValue,
                    let type = EventType(rawValue: delivery.type)
                else { return nil }
                return (delivery.eventID, user, type)
            })
    }

    // MARK: Parts

    /// Registers the run's app: its token, an In-App Purchase key the mock knows, the
    /// conformance catalogue's entitlements.
    private static func register(
        _ configuration: AppConfiguration, secretsKey: [UInt8], mock: MockAppStoreState
    ) throws -> (AppRecord, String) {
        try withAdmin(configuration) { connection in
            let admin = AppAdmin(connection: connection, secrets: try SecretBox(key: secretsKey))
            let suffix = UUID().uuidString.prefix(8).lowercased()
            let (added, token) = try admin.addApp(name: "conformance-\(suffix)", bundleID: "com.example.conformance.\(suffix)", sharedSecret: nil)
            let key = try Demo.serverAPIKey()
            try admin.setServerAPIKey(appID: added.id, issuerID: key.issuerID, keyID: key.keyID, privateKeyPEM: key.privateKeyPEM)
            try mock.serverAPI.addKey(key, bundleID: added.bundleID)
            let entitlements = EntitlementAdmin(connection: connection)
            for definition in ConformanceCatalogue(bundleID: added.bundleID).definitions {
                try entitlements.define(definition, appID: added.id, audit: audit("entitlement.define"))
            }
            guard let app = try admin.app(named: added.name) else { throw DeploymentError.appNotStored }
            return (app, token)
        }
    }

    /// Registers the receiver as the app's webhook endpoint, for every event.
    private static func connect(
        _ app: AppRecord, configuration: AppConfiguration, secretsKey: [UInt8], receiver: WebhookReceiver, url: String
    ) throws {
        let secret = try withAdmin(configuration) { connection in
            try WebhookAdmin(connection: connection, secrets: try SecretBox(key: secretsKey))
                .add(appID: app.id, url: url, allowPrivate: true, audit: audit("webhook.add")).secret
        }
        receiver.setSecret(secret)
    }

    private static func audit(_ action: String) -> AuditAction {
        AuditAction(actor: "conformance", role: nil, action: action, source: "cli")
    }

    private static func withAdmin<T>(_ configuration: AppConfiguration, _ body: (PostgresConnection) throws -> T) throws -> T {
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "conformance")
        defer { connection.close() }
        return try body(connection)
    }

    private func withJobs<T>(_ body: (HeldJobs) throws -> T) throws -> T {
        let redis = try RedisConnection(configuration: configuration.redis, label: "conformance")
        defer { redis.close() }
        return try body(HeldJobs(redis, keys: configuration.keys))
    }

    private func send(_ method: String, _ path: String, body: String = "") async throws -> (status: Int, answer: JSONValue?) {
        var headers = [(name: "Authorization", value: "Bearer \(token)")]
        if method == "POST" { headers.append((name: "Content-Type", value: "application/json")) }
        let response = try await client.send(
            HTTPRequest(method: method, url: "http://127.0.0.1:\(apiPort)\(path)", headers: headers, body: Array(body.utf8)))
        return (response.status, try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))
    }

    /// Polls `condition` every 10 ms until it holds or ``patience`` (in polls) runs out: a run
    /// settles thousands of times, most of them a few milliseconds after it asked.
    private static func poll(_ condition: () async throws -> Bool) async throws -> Bool {
        let interval = Duration.milliseconds(10)
        for _ in 0..<Int(patience / interval) {
            if try await condition() { return true }
            try await Task.sleep(for: interval)
        }
        return try await condition()
    }

    private static func deleteKeys(_ configuration: AppConfiguration) {
        guard let redis = try? RedisConnection(configuration: configuration.redis, label: "conformance-cleanup") else { return }
        defer { redis.close() }
        _ = try? RedisCleanup.deleteKeys(prefix: configuration.keys.prefix, redis)
    }

    /// Drops the run's database, closing what is still connected to it (a role's pool that was slow to go).
    private static func dropDatabase(_ database: String, on server: PostgresConfiguration) {
        guard let admin = try? PostgresConnection(configuration: server, label: "conformance-cleanup") else { return }
        defer { admin.close() }
        try? admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
    }
}

/// Why the deployment could not start, or could not settle.
public enum DeploymentError: Error, CustomStringConvertible {
    /// The API never said it listens.
    case apiDidNotStart
    /// The app just added could not be read back.
    case appNotStored
    /// Jobs were still held, or re-polls due and not queued, after ``ConformanceDeployment/patience``:
    /// which, the ones in workers' hands, and how many polls were due.
    case didNotSettle(held: [String: Int], jobs: [String], duePolls: Int)
    /// A worker kill asked of a deployment started without a worker process.
    case noWorkerProcess

    public var description: String {
        switch self {
        case .apiDidNotStart: "the deployment's API did not start"
        case .appNotStored: "the conformance app was added but cannot be read back"
        case .didNotSettle(let held, let jobs, let duePolls):
            "the deployment did not settle in \(ConformanceDeployment.patience): \(held), \(duePolls) re-polls due\n\(jobs.joined(separator: "\n"))"
        case .noWorkerProcess: "a worker kill was asked of a deployment that runs no worker process"
        }
    }
}
