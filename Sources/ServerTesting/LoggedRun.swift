import Curl
import DevTools
import Foundation
import IngestAPI
import Libpq
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptTesting
import SystemTesting
import Testing

/// `receiptq` run as separate processes against a database of its own (its scheduler re-polls
/// every app it finds, so it must not find the other suites' ones) and an in-process mock App
/// Store, with every output captured under `logDirectory`.
public final class LoggedRun: @unchecked Sendable {
    public let mock: RunningMockAppStore
    public let port: Int
    public let database: String
    public private(set) var environment: [String: String]
    public let logDirectory: URL
    public let trustDirectory: URL
    public let authority: TestCertificateAuthority
    public let client: HTTPClient
    public let forgedBundleA = "com.example.logs.a\(UUID().uuidString.prefix(6).lowercased())"
    public let forgedBundleB = "com.example.logs.b\(UUID().uuidString.prefix(6).lowercased())"
    public let secretA = "shared-secret-a-\(UUID().uuidString)"
    public let secretB = "shared-secret-b-\(UUID().uuidString)"
    public let dashboardPassword = "dashboard-password-\(UUID().uuidString)"
    public let softphonePassword = "softphone-password-\(UUID().uuidString)"
    /// Names and values that must not be in any log.
    public var secrets: [String: String] = [:]
    /// Every receipt sent, by name, as base64.
    public var receipts: [String: String] = [:]
    private var roles: [(name: String, process: ChildProcess)] = []
    private var commands = 0
    /// The stderr files of commands that failed: they end with the command's error, in plain text.
    private var failedCommands: Set<String> = []

    private init(
        mock: RunningMockAppStore, port: Int, database: String, environment: [String: String], logDirectory: URL, trustDirectory: URL,
        authority: TestCertificateAuthority
    ) throws {
        self.mock = mock
        self.port = port
        self.database = database
        self.environment = environment
        self.logDirectory = logDirectory
        self.trustDirectory = trustDirectory
        self.authority = authority
        client = try HTTPClient(options: CurlOptions(), lanes: 8)
    }

    /// Starts the mock and prepares the database; the mock takes the first app's shared secret
    /// for the forged bundle A and `realBundles.accepted`, and wants another one for bundle B and
    /// `realBundles.refused` (the real receipts' bundle ids).
    public static func start(realBundles: (accepted: [String], refused: [String])) async throws -> LoggedRun {
        let mock = try await MockAppStore.start(state: MockAppStoreState())
        let id = UUID().uuidString.prefix(8).lowercased()
        let database = "receiptq_logs_\(id)"
        let admin = try PostgresConnection(
            configuration: PostgresConfiguration(
                host: TestEnvironment.postgresHost, port: TestEnvironment.postgresPort, user: TestEnvironment.postgresUser,
                password: TestEnvironment.postgresPassword, database: TestEnvironment.postgresDatabase))
        defer { admin.close() }
        try admin.execute("CREATE DATABASE \(database)")

        let temporary = FileManager.default.temporaryDirectory
        let logDirectory = temporary.appendingPathComponent("receiptq-logs-\(id)")
        let trustDirectory = temporary.appendingPathComponent("receiptq-logs-trust-\(id)")
        for directory in [logDirectory, trustDirectory] { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true) }
        // Apple's certificates from the corpus for the real receipts, the test CA for the forged ones.
        let authority = try TestSystem.sharedAuthority.get()
        try authority.root.pem.write(to: trustDirectory.appendingPathComponent("test-root.pem"), atomically: true, encoding: .utf8)
        if let certificates = TestEnvironment.appStoreTestData?.appendingPathComponent("certs") {
            for name in try FileManager.default.contentsOfDirectory(atPath: certificates.path) where name.hasSuffix(".pem") {
                try FileManager.default.createSymbolicLink(
                    at: trustDirectory.appendingPathComponent(name), withDestinationURL: certificates.appendingPathComponent(name))
            }
        }

        // The mock's Apple-shaped chain signs its Server API answers and the StoreKit 2 transactions.
        try mock.state.serverAPI.authority.root.pem.write(
            to: trustDirectory.appendingPathComponent("jws-root.pem"), atomically: true, encoding: .utf8)

        let port = try freeLoopbackPort()
        let secrets = [
            "DASHBOARD_SESSION_SECRET": "session-secret-\(UUID().uuidString)", "SOFTPHONE_NONCE_SECRET": "nonce-secret-\(UUID().uuidString)",
            "RECEIPTQ_SECRETS_KEY": Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString(),
        ]
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("RECEIPTQ_") && !$0.key.hasPrefix("LOG_") }
        environment.merge(secrets) { _, new in new }
        environment.merge([
            "RECEIPTQ_ENV": "development", "LOG_FORMAT": "json", "LOG_LEVEL": "trace",
            "HTTP_HOST": "127.0.0.1", "HTTP_PORT": String(port), "RECEIPTQ_ADMIN_URL": "http://127.0.0.1:\(port)",
            "REDIS_HOSTNAME": TestEnvironment.redisHost, "REDIS_PORT": String(TestEnvironment.redisPort),
            "REDIS_KEY_PREFIX": "{rqt-logs-\(id)}",
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": database,
            "APPSTORE_PRODUCTION_URL": mock.productionURL, "APPSTORE_SANDBOX_URL": mock.sandboxURL, "APPSTORE_REQUEST_TIMEOUT_MS": "5000",
            "APPSTORE_SERVER_API_PRODUCTION_URL": mock.serverAPIProductionURL, "APPSTORE_SERVER_API_SANDBOX_URL": mock.serverAPISandboxURL,
            "RECEIPTQ_TRUST_ROOTS_DIR": trustDirectory.path,
            "WORKER_CONCURRENCY": "4", "API_SYNC_WAIT_MS": "3000", "RETRY_BASE_MS": "200",
        ]) { _, new in new }
        if let password = TestEnvironment.postgresPassword { environment["POSTGRES_PASSWORD"] = password }
        let run = try LoggedRun(
            mock: mock, port: port, database: database, environment: environment, logDirectory: logDirectory, trustDirectory: trustDirectory,
            authority: authority)
        run.environment["DASHBOARD_PASSWORD"] = run.dashboardPassword
        for (name, value) in secrets { run.secrets[name] = value }
        run.secrets["shared secret A"] = run.secretA
        run.secrets["shared secret B"] = run.secretB
        run.secrets["the dashboard password"] = run.dashboardPassword
        run.secrets["the softphone password"] = run.softphonePassword
        if let password = TestEnvironment.postgresPassword { run.secrets["the Postgres password"] = password }
        // Apple wants A's secret from the start; for B it wants another one until the operator fixes it.
        for bundleID in [run.forgedBundleA] + realBundles.accepted {
            mock.state.setSharedSecret(run.secretA, for: bundleID)
        }
        for bundleID in [run.forgedBundleB] + realBundles.refused {
            mock.state.setSharedSecret("apple-side-\(UUID().uuidString)", for: bundleID)
        }
        do {
            let migrated = try await run.command(["migrate"])
            try #require(migrated.status == 0, "receiptq migrate: \(tail(logDirectory.appendingPathComponent("01-migrate.stderr")))")
        } catch {
            await run.cleanUp(keepLogs: true)
            throw error
        }
        return run
    }

    // MARK: Processes

    /// Runs a one-shot command; its stdout is its answer, its stderr goes to the logs.
    public func command(_ arguments: [String], environment extra: [String: String] = [:]) async throws -> (status: Int32, output: String) {
        commands += 1
        let log = logDirectory.appendingPathComponent("\(String(format: "%02d", commands))-\(arguments.prefix(2).joined(separator: "-")).stderr")
        let environment = environment.merging(extra) { _, new in new }
        let result = try await offload { try runProcess(ReceiptqExecutable.url, arguments, environment: environment, standardError: log) }
        if result.status != 0 { failedCommands.insert(log.lastPathComponent) }
        return result
    }

    public struct App {
        public var id: String
        public var name: String
        public var token: String
    }

    /// `receiptq apps add`, the secret from the environment as the README advises.
    public func addApp(bundleIDs: [String], secret: String) async throws -> App {
        let name = "logs-\(UUID().uuidString.prefix(8).lowercased())"
        let arguments = ["apps", "add", "--name", name, "--bundle-id", bundleIDs[0]] + bundleIDs.dropFirst().flatMap { ["--also-bundle-id", $0] }
        let added = try await command(arguments, environment: ["RECEIPTQ_SHARED_SECRET": secret])
        try #require(added.status == 0, "apps add: \(added.output)")
        func field(_ key: String) throws -> String {
            let line = try #require(added.output.split(separator: "\n").first { $0.hasPrefix("\(key): ") })
            return String(line.dropFirst(key.count + 2))
        }
        let app = App(id: try field("app_id"), name: name, token: try field("token"))
        secrets["the API token of \(name)"] = app.token
        return app
    }

    /// `receiptq apps server-api-key` with a new P-256 key in a `.p8` file (removed at once), which
    /// the mock then accepts JWTs from; the key's PEM and every line of it count as secrets.
    public func setServerAPIKey(app: String, bundleID: String) async throws {
        let key = try PrivateKey.generateP256()
        let pem = try key.pemPKCS8()
        let file = trustDirectory.appendingPathComponent("AuthKey.p8")
        try Data(pem.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let keyID = "LOGS\(UInt16.random(in: 1000...9999))"
        let issuerID = UUID().uuidString.lowercased()
        let set = try await command(
            ["apps", "server-api-key", "--name", app, "--issuer-id", issuerID, "--key-id", keyID, "--key-file", file.path])
        try #require(set.status == 0, "apps server-api-key: \(set.output)")
        #expect(!set.output.contains("PRIVATE KEY"), "the key is never shown again")
        mock.state.serverAPI.addKey(issuerID: issuerID, keyID: keyID, bundleID: bundleID, publicKey: try key.publicKey)
        secrets["the In-App Purchase key"] = pem
        for (index, line) in pem.split(separator: "\n").enumerated() where !line.hasPrefix("-----") {
            secrets["line \(index) of the In-App Purchase key"] = String(line)
        }
    }

    public func setSoftphoneCredentials(app: String, username: String) async throws {
        let set = try await command(
            ["apps", "softphone-credentials", "--name", app, "--username", username], environment: ["RECEIPTQ_SOFTPHONE_PASSWORD": softphonePassword])
        try #require(set.status == 0, "apps softphone-credentials: \(set.output)")
    }

    /// Starts `serve`, `work` and `schedule` and waits until the API is ready.
    public func startRoles() async throws {
        for role in ["serve", "work", "schedule"] {
            let process = try startProcess(
                ReceiptqExecutable.url, [role], environment: environment, standardOutput: logDirectory.appendingPathComponent("\(role).stdout"),
                standardError: logDirectory.appendingPathComponent("\(role).stderr"))
            roles.append((role, process))
        }
        let ready = try await eventually(timeout: .seconds(60)) { (try? await self.send("GET", "/health/ready").status) == 200 }
        try #require(ready, "receiptq serve did not become ready: \(tail(logDirectory.appendingPathComponent("serve.stderr")))")
    }

    /// SIGTERM to every role; their exit statuses.
    @discardableResult
    public func stop() async -> [String: Int32] {
        var statuses: [String: Int32] = [:]
        for (_, process) in roles where process.isRunning { kill(process.processIdentifier, SIGTERM) }
        for (name, process) in roles {
            statuses[name] =
                (try? await offload {
                    process.waitUntilExit()
                    return process.terminationStatus
                }) ?? -1
        }
        roles = []
        return statuses
    }

    /// Stops the mock, drops the database, removes the files (the logs only unless `keepLogs`).
    public func cleanUp(keepLogs: Bool) async {
        await mock.stop()
        if let admin = try? PostgresConnection(
            configuration: PostgresConfiguration(
                host: TestEnvironment.postgresHost, port: TestEnvironment.postgresPort, user: TestEnvironment.postgresUser,
                password: TestEnvironment.postgresPassword, database: TestEnvironment.postgresDatabase))
        {
            try? admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
            admin.close()
        }
        try? FileManager.default.removeItem(at: trustDirectory)
        // RECEIPTQ_KEEP_TEST_LOGS=1 keeps them for reading after a passing run too.
        if !keepLogs && ProcessInfo.processInfo.environment["RECEIPTQ_KEEP_TEST_LOGS"] != "1" {
            try? FileManager.default.removeItem(at: logDirectory)
        }
    }

    // MARK: HTTP

    public struct Answer {
        public var status: Int
        public var json: JSONValue?
    }

    public func send(_ method: String, _ path: String, body: String = "", headers: [(String, String)] = []) async throws -> Answer {
        let response = try await client.send(
            Curl.HTTPRequest(
                method: method, url: "http://127.0.0.1:\(port)\(path)", headers: headers.map { (name: $0.0, value: $0.1) }, body: Array(body.utf8)))
        return Answer(status: response.status, json: try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))
    }

    public func post(_ path: String, json: String, token: String) async throws -> (Int, JSONValue?) {
        let answer = try await send(
            "POST", path, body: json, headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")])
        return (answer.status, answer.json)
    }

    public func get(_ path: String, token: String) async throws -> (Int, JSONValue?) {
        let answer = try await send("GET", path, headers: [("Authorization", "Bearer \(token)")])
        return (answer.status, answer.json)
    }

    /// POSTs a receipt to the client API.
    public func submit(_ receipt: String, token: String, user: String? = nil) async throws -> (Int, JSONValue?) {
        var body: [String: JSONValue] = ["receipt": .string(receipt)]
        if let user { body["user_identifier"] = .string(user) }
        return try await post(
            "/client/itunes_connect/receipts", json: String(decoding: try JSONEncoder().encode(JSONValue.object(body)), as: UTF8.self), token: token)
    }

    /// A forged receipt of `bundleID` with transaction ids of its own, remembered as `name`.
    public func forge(bundleID: String, name: String) throws -> (String, AppReceipt) {
        var receipt = ReceiptForger.demoReceipt(bundleID: bundleID)
        for index in receipt.inApp.indices {
            let id = String(UInt64.random(in: 1_000_000_000_000...9_999_999_999_999))
            receipt.inApp[index].transactionID = id
            receipt.inApp[index].originalTransactionID = id
        }
        let text = Data(try ReceiptForger.unified(receipt, authority: authority)).base64EncodedString()
        receipts[name] = text
        return (text, receipt)
    }

    // MARK: Logs

    public struct Logs {
        /// Every captured file and its bytes.
        public var files: [(name: String, bytes: [UInt8], values: String)] = []
        public var lines = 0
        public var malformed: [String] = []
        public var messages: Set<String> = []
        public var levels: Set<String> = []
        public var loggers: Set<String> = []
    }

    /// Reads every captured file: the roles' stdout and stderr, the commands' stderr (their stdout
    /// is their answer, not a log; a failed command's stderr ends with its error message).
    public func logs() throws -> Logs {
        var logs = Logs()
        let levels: Set<String> = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
        let timestamp = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/
        for name in try FileManager.default.contentsOfDirectory(atPath: logDirectory.path).sorted() {
            let bytes = [UInt8](try Data(contentsOf: logDirectory.appendingPathComponent(name)))
            var values: [String] = []
            var pieces = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            if pieces.last?.isEmpty == true { pieces.removeLast() }
            for (number, piece) in pieces.enumerated() {
                logs.lines += 1
                let where_ = "\(name):\(number + 1)"
                guard let object = try? JSONSerialization.jsonObject(with: Data(piece)) as? [String: Any] else {
                    if failedCommands.contains(name) { continue }
                    logs.malformed.append("\(where_): not a JSON object: \(String(decoding: piece.prefix(160), as: UTF8.self))")
                    continue
                }
                guard let ts = object["ts"] as? String, ts.wholeMatch(of: timestamp) != nil, let level = object["level"] as? String,
                    levels.contains(level), let logger = object["logger"] as? String, let message = object["msg"] as? String
                else {
                    logs.malformed.append("\(where_): no ts, level, logger or msg: \(String(decoding: piece.prefix(160), as: UTF8.self))")
                    continue
                }
                logs.messages.insert(message)
                logs.levels.insert(level)
                logs.loggers.insert(logger)
                Self.strings(in: object, into: &values)
            }
            logs.files.append((name, bytes, values.joined(separator: "\n")))
        }
        return logs
    }

    /// Every key and string value of a parsed line, nested ones included (what a log viewer shows).
    private static func strings(in value: Any, into strings: inout [String]) {
        switch value {
        case let text as String: strings.append(text)
        case let object as [String: Any]:
            for (key, nested) in object {
                strings.append(key)
                Self.strings(in: nested, into: &strings)
            }
        case let array as [Any]: for nested in array { Self.strings(in: nested, into: &strings) }
        default: break
        }
    }
}
