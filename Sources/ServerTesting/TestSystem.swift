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
import SystemTesting
import Telemetry
import Testing

/// A whole receiptq (API, workers, scheduler) against the real test Redis and Postgres and an
/// in-process mock App Store, isolated by a unique Redis key prefix and a unique app.
public final class TestSystem: Sendable {
    public let configuration: AppConfiguration
    /// The settings the system was started with (its Redis prefix, Postgres, mock URLs, keys).
    public let settings: [String: String]
    public let mock: RunningMockAppStore
    public let apiPort: Int
    public let token: String
    public let app: AppRecord
    public let authority: TestCertificateAuthority
    public let client: HTTPClient
    /// The registry every role of this system records into (as in `receiptq all`); the API's
    /// `GET /metrics` renders it.
    public let metrics: PrometheusExporter
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    public static let sharedAuthority = Result { try TestCertificateAuthority.generate() }
    /// The mock's Apple-shaped JWS chain, trusted like the receipt CA.
    public static let sharedJWSAuthority = Result { try MockAppleJWSAuthority.generate() }
    /// Seals the test apps' In-App Purchase keys.
    public static let secretsKey = SecureRandom.bytes(32)
    /// The In-App Purchase key (and its id) every test app gets, known to its mock.
    public let serverAPIKey: ServerAPIKey

    /// A directory trusting only the test CA (the API refuses receipts that do not chain to it).
    public static let trustDirectory = Result { () throws -> URL in
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-trust-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try sharedAuthority.get().root.pem.write(to: directory.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
        try sharedJWSAuthority.get().root.pem.write(to: directory.appendingPathComponent("jws-root.pem"), atomically: true, encoding: .utf8)
        return directory
    }

    /// The migrated test database, a connection to it and a new app (`<name>-<uuid>`): the set-up
    /// of the suites that test a store against Postgres.
    public static func newApp(named name: String, bundleID: String) throws -> (AppConfiguration, PostgresConnection, AppRecord) {
        let configuration = try migratedDatabase()
        let connection = try PostgresConnection(configuration: configuration.postgres)
        let (app, _) = try AppAdmin(connection: connection).addApp(name: "\(name)-\(UUID().uuidString)", bundleID: bundleID, sharedSecret: "s")
        return (configuration, connection, app)
    }

    /// The settings naming the tests' Postgres (its test database) and Redis, and nothing else:
    /// what a configuration read from them, or a conformance deployment, is pointed at.
    public static var serverEnvironment: [String: String] {
        var environment = [
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase,
            // The tests' Redis too: a caller that also takes `redis` from it must not fall back to the
            // default port (a fresh run's servers may listen elsewhere).
            "REDIS_HOSTNAME": TestEnvironment.redisHost, "REDIS_PORT": String(TestEnvironment.redisPort),
        ]
        if let password = TestEnvironment.postgresPassword { environment["POSTGRES_PASSWORD"] = password }
        return environment
    }

    /// A configuration for the test database alone, migrated: for suites that need Postgres but no
    /// running system.
    public static func migratedDatabase() throws -> AppConfiguration {
        let configuration = try AppConfiguration(environment: serverEnvironment)
        try ReceiptQueueApp.migrate(configuration)
        return configuration
    }

    /// Starts everything; `environment` overrides configuration variables.
    /// - Parameters:
    ///   - schedulerClock: the scheduler's injected clock (tests move it to make re-polls due).
    ///   - notificationSweep: also run the schedule role's notification history sweep (of this
    ///     system's app), as `receiptq all` does.
    ///   - simulatedClock: one clock for the system's answers (the conformance suite's simulated
    ///     time): the mock App Store's, the client API's answers, the dates of Apple's answers the
    ///     worker stores, the sweep's; nil: the machine's. The scheduler keeps `schedulerClock`:
    ///     the worker plans each next poll on the machine's clock (its retries share Redis's), and
    ///     a scheduler ahead of it would find every poll due at once.
    public static func start(
        environment overrides: [String: String] = [:], sharedSecret: String? = "integration-secret",
        schedulerClock: @escaping @Sendable () -> Date = { Date() }, notificationSweep: Bool = false,
        simulatedClock: (@Sendable () -> Date)? = nil
    ) async throws
        -> TestSystem
    {
        let machine: @Sendable () -> Date = { Date() }
        let mock = try await MockAppStore.start(
            state: MockAppStoreState(authority: try sharedJWSAuthority.get(), now: simulatedClock ?? machine))
        let prefix = "{rqt-\(UUID().uuidString.prefix(8).lowercased())}"
        var environment = serverEnvironment.merging(mock.settings) { _, mock in mock }
        environment.merge([
            "HTTP_HOST": "127.0.0.1", "HTTP_PORT": "0", "REDIS_KEY_PREFIX": prefix,
            "RECEIPTQ_SECRETS_KEY": Data(secretsKey).base64EncodedString(),
            "APPSTORE_REQUEST_TIMEOUT_MS": "5000",
            // Long: tests that expect 200 mean "validated", and in CI's full parallel run a worker can
            // be starved past 5 s (tests of the 206 set their own wait).
            "WORKER_CONCURRENCY": "4", "API_SYNC_WAIT_MS": "20000", "RETRY_BASE_MS": "200",
        ]) { _, new in new }
        environment["RECEIPTQ_TRUST_ROOTS_DIR"] = try trustDirectory.get().path
        environment.merge(overrides) { _, new in new }
        let configuration = try AppConfiguration(environment: environment)
        try ReceiptQueueApp.migrate(configuration)

        let connection = try PostgresConnection(configuration: configuration.postgres)
        defer { connection.close() }
        let bundleID = "com.example.it.\(UUID().uuidString.prefix(8).lowercased())"
        let admin = AppAdmin(connection: connection, secrets: try SecretBox(key: secretsKey))
        let (added, token) = try admin.addApp(name: "it-\(UUID().uuidString)", bundleID: bundleID, sharedSecret: sharedSecret)
        mock.state.setSharedSecret(sharedSecret, for: bundleID)
        // Every test app can use the Server API; receipts still go to verifyReceipt while it answers.
        let signingKey = try PrivateKey.generateP256()
        let serverAPIKey = ServerAPIKey(
            issuerID: "it-issuer", keyID: "IT\(UInt32.random(in: 0...UInt32.max))", privateKeyPEM: try signingKey.pemPKCS8())
        try admin.setServerAPIKey(
            appID: added.id, issuerID: serverAPIKey.issuerID, keyID: serverAPIKey.keyID, privateKeyPEM: serverAPIKey.privateKeyPEM)
        mock.state.serverAPI.addKey(
            issuerID: serverAPIKey.issuerID, keyID: serverAPIKey.keyID, bundleID: bundleID, publicKey: try signingKey.publicKey)
        // The sweep covers apps that have a notification URL.
        if notificationSweep { _ = try admin.rotateNotificationToken(appID: added.id) }
        let app = try #require(try admin.app(named: added.name))

        var logger = Logger(label: "it")
        logger.logLevel = .warning
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let metrics = PrometheusExporter()
        // As `Runtime.run` does: the sentinels' announcements heard for every role (with a Sentinel set).
        let sentinels = RedisSentinelWatch(configuration: configuration.redis, logger: logger)
        // Its own app only: the test database is shared, and so is its subscriptions table.
        let roles = try ReceiptQueueApp.makeRoles(
            configuration, onlyApps: [app.id], now: simulatedClock ?? machine, schedulerNow: schedulerClock,
            notificationSweep: notificationSweep, metrics: metrics, logger: logger
        ) { port in
            continuation.yield(port)
            continuation.finish()
        }
        let services: [any Service] = (sentinels.map { [$0] } ?? []) + roles.services
        let group = ServiceGroup(services: services, gracefulShutdownSignals: [], logger: logger)
        let task = Task(executorPreference: ServerThreads.shared) { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        return TestSystem(
            configuration: configuration, settings: environment, mock: mock, apiPort: port, token: token, app: app,
            authority: try sharedAuthority.get(), serverAPIKey: serverAPIKey, client: try HTTPClient(options: CurlOptions(), lanes: 8),
            metrics: metrics, group: group, task: task)
    }

    private init(
        configuration: AppConfiguration, settings: [String: String], mock: RunningMockAppStore, apiPort: Int, token: String, app: AppRecord,
        authority: TestCertificateAuthority, serverAPIKey: ServerAPIKey, client: HTTPClient, metrics: PrometheusExporter, group: ServiceGroup,
        task: Task<Void, any Error>
    ) {
        self.serverAPIKey = serverAPIKey
        self.configuration = configuration
        self.settings = settings
        self.mock = mock
        self.apiPort = apiPort
        self.token = token
        self.app = app
        self.authority = authority
        self.client = client
        self.metrics = metrics
        self.group = group
        self.task = task
    }

    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
        await mock.stop()
        // The shared test Redis outlives the run: without this, every run left thousands of
        // idempotency and pending keys (a day's and eight days' TTL). A test on a Redis of its
        // own (a replica set, a tunnel, sentinels) has already stopped that Redis.
        let redis = configuration.redis
        if redis.sentinel == nil, redis.host == TestEnvironment.redisHost, redis.port == TestEnvironment.redisPort,
            let connection = try? RedisConnection(configuration: redis, label: "it-cleanup")
        {
            _ = try? RedisCleanup.deleteKeys(prefix: configuration.keys.prefix, connection)
            connection.close()
        }
    }

    public var receiptsURL: String { "http://127.0.0.1:\(apiPort)/client/itunes_connect/receipts" }

    /// A forged receipt of this system's app (sandbox by default), base64.
    public func forgeReceipt(environment: ReceiptEnvironment = .productionSandbox, mock directives: String? = nil) throws -> (String, AppReceipt) {
        var receipt = ReceiptForger.demoReceipt(bundleID: app.bundleID)
        receipt.environment = environment
        if let directives { receipt.opaqueValue = Array("mock:\(directives)".utf8) }
        return (Data(try ReceiptForger.unified(receipt, authority: authority)).base64EncodedString(), receipt)
    }

    /// A StoreKit 2 purchase of this system's app, signed by the mock's Apple-shaped chain and
    /// known to the mock's Server API in `environment` (`Sandbox` or `Production`), priced `price`
    /// (9.99 USD unless told), with `fields` set over the rest (an offer, a quantity, ownership),
    /// bought and signed at `now` (a system on a simulated clock signs at its time).
    public func signedTransaction(
        product: String = "com.example.yearly", days: Double? = 365, environment: String = "Sandbox",
        price: Money? = ReceiptForger.defaultPrice, fields: [String: JSONValue] = [:], now: Date = Date()
    ) throws -> (jws: String, payload: JSONValue) {
        let transaction = try ReceiptForger.signedTransaction(
            bundleID: app.bundleID, productID: product, days: days, environment: environment, authority: try Self.sharedJWSAuthority.get(),
            now: now, price: price, fields: fields)
        mock.state.serverAPI.add(transactions: [transaction.payload], environment: environment == "Production" ? .production : .sandbox)
        return transaction
    }

    /// Sends `body` to `path` (default: the receipts door) with this system's token (or `token`);
    /// `method` is `POST` unless a door takes a `PUT`.
    public func post(
        _ body: String, token: String? = nil, contentType: String = "application/json", path: String? = nil, method: String = "POST"
    ) async throws -> (Int, JSONValue?) {
        var headers: [(name: String, value: String)] = [(name: "Content-Type", value: contentType)]
        headers.append((name: "Authorization", value: "Bearer \(token ?? self.token)"))
        let url = path.map { "http://127.0.0.1:\(apiPort)\($0)" } ?? receiptsURL
        let response = try await client.sendNamingFailure(Curl.HTTPRequest(method: method, url: url, headers: headers, body: Array(body.utf8)))
        return (response.status, try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))
    }

    public func get(_ id: String, token: String? = nil) async throws -> (Int, JSONValue?) {
        try await get(path: "/client/itunes_connect/receipts/\(id)", token: token)
    }

    /// GET `path` on the API with this system's token (or `token`).
    public func get(path: String, token: String? = nil) async throws -> (Int, JSONValue?) {
        let response = try await client.sendNamingFailure(
            Curl.HTTPRequest(
                method: "GET", url: "http://127.0.0.1:\(apiPort)\(path)",
                headers: [(name: "Authorization", value: "Bearer \(token ?? self.token)")], body: []))
        return (response.status, try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))
    }

    /// The environment of a `receiptq …` command run against this system: this process's, with
    /// the system's own settings (its Redis prefix, the test database, the mock's URLs, the secrets
    /// key and trust roots), so the command sees what the running roles see.
    public func commandLineEnvironment(_ extra: [String: String] = [:]) -> [String: String] {
        ProcessInfo.processInfo.environment.merging(settings) { _, system in system }.merging(extra) { _, new in new }
    }

    public func postgres() throws -> PostgresConnection { try PostgresConnection(configuration: configuration.postgres) }

    public func redis() throws -> RedisConnection { try RedisConnection(configuration: configuration.redis) }

    /// Whether this system's Redis holds no job of `kinds` (nil: of any kind): queued, in a
    /// worker's hands or waiting to be retried (the dead letters do not count: nothing leaves them
    /// by itself). Once it holds, and nothing is being posted, no such job will store anything
    /// more: the barrier after which a test checks that something did *not* happen (a duplicate
    /// stored, a job run twice).
    public func queuesIdle(_ kinds: Set<JobKind>? = nil) throws -> Bool { try heldJobs(kinds).isEmpty }

    /// The jobs of `kinds` (nil: any) this system's Redis holds, by key (queues, processing lists,
    /// the retry set); for `queuesIdle` and its failure messages.
    public func heldJobs(_ kinds: Set<JobKind>? = nil) throws -> [String: Int] {
        let redis = try redis()
        defer { redis.close() }
        return try HeldJobs(redis, keys: configuration.keys).counts(kinds)
    }

    /// The value of one series of this system's metrics, e.g.
    /// `metric("receiptq_jobs_processed_total", ["outcome": "dead"])`; nil when it is not exported.
    public func metric(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let series =
            labels.isEmpty ? name : name + "{" + labels.sorted { $0.key < $1.key }.map { "\($0.key)=\"\($0.value)\"" }.joined(separator: ",") + "}"
        let text = String(decoding: metrics.exposition(), as: UTF8.self)
        return text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.dropFirst(series.count + 1)) }
    }

    /// Every job this system's workers settled, whatever the outcome.
    public var jobsSettled: Double {
        JobOutcome.allCases.reduce(0) { $0 + (metric("receiptq_jobs_processed_total", ["outcome": $1.rawValue]) ?? 0) }
    }
}

/// `receiptq serve` alone (no worker, no scheduler) with `configuration`, on a free port: for tests
/// of an API whose Redis or Postgres is not there.
public final class StandaloneAPI: Sendable {
    public let port: Int
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    public init(_ configuration: AppConfiguration) async throws {
        var logger = Logger(label: "it-standalone-api")
        logger.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let api = try ReceiptQueueApp.makeAPI(
            configuration, logger: logger,
            onRunning: { port in
                continuation.yield(port)
                continuation.finish()
            })
        let group = ServiceGroup(services: [api], gracefulShutdownSignals: [], logger: logger)
        let task = Task(executorPreference: ServerThreads.shared) { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            task.cancel()
            throw RestartTestError("the API did not start")
        }
        self.port = port
        self.group = group
        self.task = task
    }

    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}

/// Runs `executable` to its end, stdout and stderr together (read before waiting: a full pipe
/// would block the child forever), or stdout alone when `standardError` names a file for stderr
/// (created, or appended to); in `directory` when given. A ``ChildProcess``, not Foundation's
/// `Process`, which crashes now and then reading the descriptor list of a process holding as many
/// as this one does with every suite running.
public func runProcess(
    _ executable: URL, _ arguments: [String], environment: [String: String], standardError: URL? = nil, directory: URL? = nil
) throws -> (status: Int32, output: String) {
    let result = try ChildProcess.run(
        [executable.path] + arguments, environment: environment, directory: directory?.path,
        stderr: standardError.map { .file($0.path) } ?? .output)
    return (result.status, String(decoding: result.output, as: UTF8.self))
}

/// Starts `executable` in the background, its stdout and stderr appended to these files (nil:
/// discarded). The caller stops it (SIGTERM) and waits for it.
public func startProcess(
    _ executable: URL, _ arguments: [String], environment: [String: String], standardOutput: URL? = nil, standardError: URL? = nil
) throws -> ChildProcess {
    try ChildProcess(
        [executable.path] + arguments, environment: environment, stdout: standardOutput.map { .file($0.path) } ?? .null,
        stderr: standardError.map { .file($0.path) } ?? .null)
}

extension AuditAction {
    /// An action of the tests themselves, for the audit log.
    public static func test(_ action: String) -> AuditAction { AuditAction(actor: "tests", role: nil, action: action, source: "cli") }
}

extension HTTPClient {
    /// Sends `request`; a failure names the request, so a timeout in a long test says which call
    /// had no answer (test URLs hold no secret: tokens travel in headers).
    public func sendNamingFailure(_ request: Curl.HTTPRequest) async throws -> Curl.HTTPResponse {
        let started = ContinuousClock.now
        do {
            return try await send(request)
        } catch {
            throw TestRequestError(request: "\(request.method) \(request.url)", after: ContinuousClock.now - started, underlying: error)
        }
    }
}

/// A test's request that got no answer: which one, after how long, and why.
public struct TestRequestError: Error, CustomStringConvertible {
    public let request: String
    public let after: Duration
    public let underlying: any Error

    public var description: String { "\(request) failed after \(after): \(underlying)" }
}

/// The `receiptq` executable of this checkout's debug build, which tests of processes run.
public enum ReceiptqExecutable {
    public static let url = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".build/debug/receiptq")
}
