import Curl
import Foundation
import IngestAPI
import Libpq
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// The logs of a whole run, as an operator's log collector gets them: `receiptq migrate`, `apps`,
/// `serve`, `work`, `schedule` and `dlq` as separate processes with `LOG_FORMAT=json LOG_LEVEL=trace`,
/// every stdout and stderr captured to a file. A realistic session goes through them (real Apple
/// receipts and forged ones, a wrong token, bad input, a shared secret Apple refuses, dead letters
/// retried from the dashboard, the Cloud Softphone service); then every line must be a JSON object,
/// and no receipt, shared secret, token, password or session cookie may appear anywhere.
@Suite("Logs of a whole run: JSON lines, no secrets, no receipts", .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct LogSecretsTests {
    /// The real receipts sent (from the shared corpus, when it is there) and their bundle ids:
    /// the first three belong to the app whose secret Apple takes, the last to the one it refuses.
    static let realReceipts = [
        ("revenuecat-sandboxReceipt", "com.revenuecat.sampleapp"), ("kvitto-sandboxReceipt", "com.cocoanetics.EmmiView"),
        ("tpinappreceipt-production", "org.getpure.pure-iphone"), ("aporat-example-itunes-receipt", "com.dashedspace.analytics"),
    ]

    @Test("A whole session at trace level: every line is JSON with ts/level/logger/msg, and no secret or receipt is in any log")
    func wholeRun() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build receiptq first (swift build)")
        let run = try await LoggedRun.start()
        do {
            try await session(run)
        } catch {
            await run.stop()
            await run.cleanUp(keepLogs: true)
            throw error
        }
        let exits = await run.stop()
        #expect(exits.allSatisfy { $0.value == 0 }, "SIGTERM ends every role cleanly: \(exits)")
        let logs: LoggedRun.Logs
        do {
            logs = try run.logs()
        } catch {
            await run.cleanUp(keepLogs: true)
            throw error
        }
        let directory = run.logDirectory.path
        #expect(logs.lines > 50, "a run at trace level says a lot (\(logs.lines) lines)")
        #expect(
            logs.malformed.isEmpty,
            "lines of \(directory) that are not one JSON object with ts, level, logger and msg:\n\(logs.malformed.prefix(10).joined(separator: "\n"))"
        )
        // The run was seen: what each step logs is there, and trace reached the files.
        for message in [
            "Worker started", "Receipt submitted", "API authentication refused", "Receipt request refused", "Job stored",
            "Job scheduled for a retry", "Job moved to the dead letters", "Admin login failed", "Admin login", "Admin action",
            "Softphone purchase answered", "Softphone authentication refused",
        ] {
            #expect(logs.messages.contains(message), "no \(message) in the logs")
        }
        #expect(logs.levels.contains("trace") && logs.levels.contains("debug"))
        #expect(logs.loggers.isSuperset(of: ["receiptq.serve", "receiptq.work", "receiptq.schedule", "receiptq.migrate", "receiptq.apps"]))
        #expect(logs.loggers.allSatisfy { $0.hasPrefix("receiptq.") }, "every line names its process: \(logs.loggers.sorted())")

        let tokens = run.mock.state.serverAPI.acceptedTokens
        #expect(!tokens.isEmpty, "the workers asked the Server API with a JWT")
        for (index, token) in tokens.enumerated() { run.secrets["Server API JWT \(index)"] = token }
        let leaks = LeakScanner(secrets: run.secrets, receipts: run.receipts).scan(logs.files)
        #expect(leaks.isEmpty, "secrets or receipt data in the logs of \(directory):\n\(leaks.prefix(20).joined(separator: "\n"))")
        // The logs stay in their directory (named in the failures) when something was found.
        await run.cleanUp(keepLogs: !leaks.isEmpty || !logs.malformed.isEmpty)
    }

    /// What an app backend, an operator and a softphone do against the running processes.
    private func session(_ run: LoggedRun) async throws {
        let appA = try await run.addApp(bundleIDs: [run.forgedBundleA] + Self.realReceipts.dropLast().map(\.1), secret: run.secretA)
        let appB = try await run.addApp(bundleIDs: [run.forgedBundleB, Self.realReceipts.last!.1], secret: run.secretB)
        let softphoneUser = "sp-\(UUID().uuidString.prefix(8).lowercased())"
        try await run.setSoftphoneCredentials(app: appA.name, username: softphoneUser)
        try await run.setServerAPIKey(app: appA.name, bundleID: run.forgedBundleA)
        try await run.startRoles()

        // Receipts of A: real ones (Apple's signatures, judged at their creation date) and forged ones.
        var idsA: [String] = []
        let corpus = TestEnvironment.appStoreTestData
        var realB: String?
        for (name, bundleID) in Self.realReceipts {
            guard let corpus else { break }
            let text = try String(contentsOf: corpus.appendingPathComponent("receipts/\(name).b64"), encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            run.receipts[name] = text
            if bundleID == Self.realReceipts.last!.1 {
                realB = text
                continue
            }
            let (status, body) = try await run.submit(text, token: appA.token, user: "user-\(name)")
            #expect([200, 206].contains(status), "\(name): \(status)")
            idsA.append(try #require(body?["id"]?.stringValue))
        }
        for index in 0..<2 {
            let (receipt, _) = try run.forge(bundleID: run.forgedBundleA, name: "forged-a-\(index)")
            let (status, body) = try await run.submit(receipt, token: appA.token, user: "forged-user-\(index)")
            #expect([200, 206].contains(status))
            idsA.append(try #require(body?["id"]?.stringValue))
        }

        // Apple stumbles once on two of them (an HTTP 503, an HTML page): retried, then valid.
        for (index, stumble) in [MockRule(httpStatus: 503, times: 1), MockRule(body: "html", times: 1)].enumerated() {
            let (receipt, decoded) = try run.forge(bundleID: run.forgedBundleA, name: "forged-a-retried-\(index)")
            var rule = stumble
            rule.transactionID = decoded.inApp.first?.transactionID
            run.mock.state.addRule(rule)
            let (status, body) = try await run.submit(receipt, token: appA.token, user: "retried-user-\(index)")
            #expect([200, 206].contains(status))
            idsA.append(try #require(body?["id"]?.stringValue))
        }

        // A wrong token, and bad input (one of them a cut receipt).
        let wrongToken = "rq_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        run.secrets["a wrong API token"] = wrongToken
        let (receipt, _) = try run.forge(bundleID: run.forgedBundleA, name: "forged-a-refused")
        #expect(try await run.submit(receipt, token: wrongToken).0 == 401)
        #expect(try await run.get("/client/itunes_connect/receipts/\(idsA[0])", token: wrongToken).0 == 401)
        #expect(try await run.post("/client/itunes_connect/receipts", json: #"{"receipt":42}"#, token: appA.token).0 == 422)
        let cut = String(receipt.prefix(600))
        #expect(try await run.submit(cut, token: appA.token).0 == 422)
        #expect(try await run.post("/client/itunes_connect/receipts", json: #"{"receipt":"\#(receipt)""#, token: appA.token).0 == 422)

        // Receipts of B, whose shared secret Apple refuses (21004): they go to the dead letters.
        var idsB: [String] = []
        for index in 0..<2 {
            let (receipt, _) = try run.forge(bundleID: run.forgedBundleB, name: "forged-b-\(index)")
            idsB.append(try #require(try await run.submit(receipt, token: appB.token, user: "dead-user-\(index)").1?["id"]?.stringValue))
        }
        if let realB {
            idsB.append(try #require(try await run.submit(realB, token: appB.token, user: "dead-real").1?["id"]?.stringValue))
        }
        let deadPath = "/admin/dead?app_id=\(appB.id)&error_code=shared_secret_mismatch"

        // The operator: a wrong password, then the right one; the pages; the command line.
        let browser = DashboardPagesTests.Browser(client: run.client, port: run.port)
        #expect(try await browser.logIn(password: "not-" + run.dashboardPassword).status == 401)
        #expect(try await browser.logIn(password: run.dashboardPassword).status == 303)
        #expect(try await browser.get("/admin").status == 200)
        let buried = try await run.eventually {
            try await browser.get(deadPath).text.contains(#"<strong id="matching">\#(idsB.count)</strong>"#)
        }
        #expect(buried, "B's receipts reach the dead letters")
        let list = try await browser.get(deadPath)
        #expect(try await browser.get("/admin/dead/\(idsB[0].lowercased())").status == 200)
        #expect(try await browser.get("/admin/retries").status == 200)
        for (name, value) in browser.cookies { run.secrets["the dashboard cookie \(name)"] = value }
        let csrf = try #require(list.csrf)
        run.secrets["the dashboard CSRF token"] = csrf
        let listed = try await run.command(["dlq", "list", "--app", appB.name], environment: ["DASHBOARD_PASSWORD": run.dashboardPassword])
        #expect(listed.status == 0 && listed.output.contains(idsB[0].lowercased()))
        #expect(try await run.command(["dlq", "list"], environment: ["DASHBOARD_PASSWORD": "wrong-\(run.dashboardPassword)"]).status != 0)

        // The secret is fixed at Apple's side; the operator retries them all.
        for bundleID in [run.forgedBundleB, Self.realReceipts.last!.1] { run.mock.state.setSharedSecret(run.secretB, for: bundleID) }
        let retried = try await browser.post(
            "/admin/dead/retry", [("csrf", csrf), ("all", "1"), ("app_id", appB.id), ("error_code", "shared_secret_mismatch")])
        #expect(retried.status == 303)

        // The Cloud Softphone: form POST with Basic credentials, GET with a token, a wrong password.
        let (phoneReceipt, phoneDecoded) = try run.forge(bundleID: run.forgedBundleA, name: "softphone")
        let product = try #require(phoneDecoded.inApp.first?.productID)
        let basic = "Basic " + Data("\(softphoneUser):\(run.softphonePassword)".utf8).base64EncodedString()
        run.secrets["the softphone Basic header"] = basic
        let form = "username=phone-user&productCode=\(product.formEncoded)&price=0.99&currency=EUR&receipt=\(phoneReceipt.formEncoded)"
        let byForm = try await run.send(
            "POST", SoftphoneService.path, body: form,
            headers: [("Authorization", basic), ("Content-Type", "application/x-www-form-urlencoded")])
        #expect([200, 202].contains(byForm.status), "softphone POST: \(byForm.status)")
        let (queryReceipt, queryDecoded) = try run.forge(bundleID: run.forgedBundleA, name: "softphone-query")
        let queryProduct = queryDecoded.inApp[0].productID.formEncoded
        let query = "token=\(appA.token)&username=phone-user-2&productCode=\(queryProduct)&receipt=\(queryReceipt.formEncoded)"
        let byQuery = try await run.send("GET", SoftphoneService.path + "?" + query)
        #expect([200, 202].contains(byQuery.status), "softphone GET: \(byQuery.status)")
        let wrongBasic = "Basic " + Data("\(softphoneUser):wrong-\(run.softphonePassword)".utf8).base64EncodedString()
        run.secrets["a wrong softphone Basic header"] = wrongBasic
        #expect(try await run.send("POST", SoftphoneService.path, body: form, headers: [("Authorization", wrongBasic)]).status == 401)

        // StoreKit 2: A's signed transactions through the Server API with A's In-App Purchase key; a
        // forged one; a bare transaction id.
        let authority = run.mock.state.serverAPI.authority
        var transactionIDs: [String] = []
        for index in 0..<2 {
            let (jws, payload) = try ReceiptForger.signedTransaction(
                bundleID: run.forgedBundleA, productID: "\(run.forgedBundleA).pro", days: 30, authority: authority)
            run.mock.state.serverAPI.add(transactions: [payload], environment: .sandbox)
            run.receipts["signed transaction \(index)"] = jws
            let body = #"{"signed_transaction":"\#(jws)","user_identifier":"sk2-user-\#(index)"}"#
            let (status, resource) = try await run.post("/client/transactions", json: body, token: appA.token)
            #expect([200, 206].contains(status), "signed transaction: \(status)")
            transactionIDs.append(try #require(resource?["id"]?.stringValue))
            if index == 1, let id = payload["transactionId"]?.stringValue {
                let byID = try await run.post("/client/transactions", json: #"{"transaction_id":"\#(id)1"}"#, token: appA.token)
                #expect([200, 206].contains(byID.0), "transaction id: \(byID.0)")
            }
        }
        let (forgedJWS, _) = try ReceiptForger.signedTransaction(
            bundleID: run.forgedBundleA, productID: "\(run.forgedBundleA).pro", days: 30, authority: try MockAppleJWSAuthority.generate())
        run.receipts["a forged signed transaction"] = forgedJWS
        #expect(try await run.post("/client/transactions", json: #"{"signed_transaction":"\#(forgedJWS)"}"#, token: appA.token).0 == 402)
        idsA += transactionIDs

        // App Store Server Notifications: the URL's token is a secret; a V2 notification (its payload is
        // purchase data), a V1 one carrying the shared secret and a receipt, one with a wrong password.
        let issued = try await run.command(["apps", "notification-url", "--name", appA.name, "--base-url", "http://127.0.0.1:\(run.port)"])
        #expect(issued.status == 0, "apps notification-url")
        let notificationPath = String(
            issued.output.trimmingCharacters(in: .whitespacesAndNewlines).dropFirst("http://127.0.0.1:\(run.port)".count))
        run.secrets["the notification URL's token"] = String(notificationPath.split(separator: "/").last ?? "")
        let signedNotification = try authority.sign(
            .object([
                "notificationType": .string("TEST"), "notificationUUID": .string(UUID().uuidString),
                "signedDate": .number((Date().timeIntervalSince1970 * 1000).rounded()),
                "data": .object(["bundleId": .string(run.forgedBundleA), "environment": .string("Sandbox")]),
            ]))
        run.receipts["a signed notification"] = signedNotification
        #expect(try await run.post(notificationPath, json: #"{"signedPayload":"\#(signedNotification)"}"#, token: "none").0 == 200)
        let (latestReceipt, _) = try run.forge(bundleID: run.forgedBundleA, name: "v1-notification")
        let v1 =
            #"{"notification_type":"DID_RENEW","password":"\#(run.secretA)","bid":"\#(run.forgedBundleA)","unified_receipt":{"status":0,"latest_receipt":"\#(latestReceipt)","latest_receipt_info":[]}}"#
        #expect(try await run.post(notificationPath, json: v1, token: "none").0 == 200)
        let wrongV1 = #"{"notification_type":"DID_RENEW","password":"wrong-\#(run.secretA)"}"#
        run.secrets["a wrong V1 notification password"] = "wrong-\(run.secretA)"
        #expect(try await run.post(notificationPath, json: wrongV1, token: "none").0 == 401)

        // Everything settles: A's receipts and B's retried ones are valid.
        #expect(try await run.get("/client/subscriptions?user_identifier=user-revenuecat-sandboxReceipt", token: appA.token).0 == 200)
        for (ids, token) in [(idsA, appA.token), (idsB, appB.token)] {
            for id in ids {
                let valid = try await run.eventually {
                    try await run.get("/client/itunes_connect/receipts/\(id)", token: token).1?["validation_status"]?.stringValue == "valid"
                }
                #expect(valid, "receipt \(id) is validated")
            }
        }
    }
}

/// `receiptq` run as separate processes against a database of its own (its scheduler re-polls
/// every app it finds, so it must not find the other suites' ones) and an in-process mock App
/// Store, with every output captured under `logDirectory`.
final class LoggedRun: @unchecked Sendable {
    let mock: RunningMockAppStore
    let port: Int
    let database: String
    private(set) var environment: [String: String]
    let logDirectory: URL
    let trustDirectory: URL
    let authority: TestCertificateAuthority
    let client: HTTPClient
    let forgedBundleA = "com.example.logs.a\(UUID().uuidString.prefix(6).lowercased())"
    let forgedBundleB = "com.example.logs.b\(UUID().uuidString.prefix(6).lowercased())"
    let secretA = "shared-secret-a-\(UUID().uuidString)"
    let secretB = "shared-secret-b-\(UUID().uuidString)"
    let dashboardPassword = "dashboard-password-\(UUID().uuidString)"
    let softphonePassword = "softphone-password-\(UUID().uuidString)"
    /// Names and values that must not be in any log.
    var secrets: [String: String] = [:]
    /// Every receipt sent, by name, as base64.
    var receipts: [String: String] = [:]
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

    static func start() async throws -> LoggedRun {
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
        for bundleID in [run.forgedBundleA] + LogSecretsTests.realReceipts.dropLast().map(\.1) {
            mock.state.setSharedSecret(run.secretA, for: bundleID)
        }
        for bundleID in [run.forgedBundleB, LogSecretsTests.realReceipts.last!.1] {
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
    func command(_ arguments: [String], environment extra: [String: String] = [:]) async throws -> (status: Int32, output: String) {
        commands += 1
        let log = logDirectory.appendingPathComponent("\(String(format: "%02d", commands))-\(arguments.prefix(2).joined(separator: "-")).stderr")
        let environment = environment.merging(extra) { _, new in new }
        let result = try await offload { try runProcess(CrashRecoveryTests.binary, arguments, environment: environment, standardError: log) }
        if result.status != 0 { failedCommands.insert(log.lastPathComponent) }
        return result
    }

    struct App {
        var id: String
        var name: String
        var token: String
    }

    /// `receiptq apps add`, the secret from the environment as the README advises.
    func addApp(bundleIDs: [String], secret: String) async throws -> App {
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
    func setServerAPIKey(app: String, bundleID: String) async throws {
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

    func setSoftphoneCredentials(app: String, username: String) async throws {
        let set = try await command(
            ["apps", "softphone-credentials", "--name", app, "--username", username], environment: ["RECEIPTQ_SOFTPHONE_PASSWORD": softphonePassword])
        try #require(set.status == 0, "apps softphone-credentials: \(set.output)")
    }

    /// Starts `serve`, `work` and `schedule` and waits until the API is ready.
    func startRoles() async throws {
        for role in ["serve", "work", "schedule"] {
            let process = try startProcess(
                CrashRecoveryTests.binary, [role], environment: environment, standardOutput: logDirectory.appendingPathComponent("\(role).stdout"),
                standardError: logDirectory.appendingPathComponent("\(role).stderr"))
            roles.append((role, process))
        }
        let ready = try await eventually(timeout: .seconds(60)) { (try? await self.send("GET", "/health/ready").status) == 200 }
        try #require(ready, "receiptq serve did not become ready: \(tail(logDirectory.appendingPathComponent("serve.stderr")))")
    }

    /// SIGTERM to every role; their exit statuses.
    @discardableResult
    func stop() async -> [String: Int32] {
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
    func cleanUp(keepLogs: Bool) async {
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

    struct Answer {
        var status: Int
        var json: JSONValue?
    }

    func send(_ method: String, _ path: String, body: String = "", headers: [(String, String)] = []) async throws -> Answer {
        let response = try await client.send(
            Curl.HTTPRequest(
                method: method, url: "http://127.0.0.1:\(port)\(path)", headers: headers.map { (name: $0.0, value: $0.1) }, body: Array(body.utf8)))
        return Answer(status: response.status, json: try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))
    }

    func post(_ path: String, json: String, token: String) async throws -> (Int, JSONValue?) {
        let answer = try await send(
            "POST", path, body: json, headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")])
        return (answer.status, answer.json)
    }

    func get(_ path: String, token: String) async throws -> (Int, JSONValue?) {
        let answer = try await send("GET", path, headers: [("Authorization", "Bearer \(token)")])
        return (answer.status, answer.json)
    }

    /// POSTs a receipt to the client API.
    func submit(_ receipt: String, token: String, user: String? = nil) async throws -> (Int, JSONValue?) {
        var body: [String: JSONValue] = ["receipt": .string(receipt)]
        if let user { body["user_identifier"] = .string(user) }
        return try await post(
            "/client/itunes_connect/receipts", json: String(decoding: try JSONEncoder().encode(JSONValue.object(body)), as: UTF8.self), token: token)
    }

    /// A forged receipt of `bundleID` with transaction ids of its own, remembered as `name`.
    func forge(bundleID: String, name: String) throws -> (String, AppReceipt) {
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

    /// Polls `condition` until it holds, counting polls (see `TestSystem.eventually`).
    func eventually(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async throws -> Bool {
        for _ in 0..<max(1, Int(timeout / .milliseconds(100))) {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return try await condition()
    }

    // MARK: Logs

    struct Logs {
        /// Every captured file and its bytes.
        var files: [(name: String, bytes: [UInt8], values: String)] = []
        var lines = 0
        var malformed: [String] = []
        var messages: Set<String> = []
        var levels: Set<String> = []
        var loggers: Set<String> = []
    }

    /// Reads every captured file: the roles' stdout and stderr, the commands' stderr (their stdout
    /// is their answer, not a log; a failed command's stderr ends with its error message).
    func logs() throws -> Logs {
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

/// Finds secrets and receipts in logs: each secret whole, each receipt whole or any 24 characters
/// of it past its first 16 (a PKCS#7 header that all receipts share), in the raw text, in the
/// decoded JSON strings (`\/` escapes undone) and in the percent-decoded text (a logged URL or form).
struct LeakScanner {
    /// 24 bytes, as three words.
    struct Window: Hashable {
        var a: UInt64
        var b: UInt64
        var c: UInt64

        init(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
            a = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            b = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            c = bytes.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self)
        }
    }

    static let windowSize = 24
    static let skippedPrefix = 16

    let needles: [(name: String, value: [UInt8])]
    private var windows: [Window: String] = [:]

    init(secrets: [String: String], receipts: [String: String]) {
        var needles = secrets.map { ($0.key, Array($0.value.utf8)) }
        var windows: [Window: String] = [:]
        for (name, receipt) in receipts {
            needles.append(("receipt \(name)", Array(receipt.utf8)))
            let bytes = Array(receipt.utf8)
            guard bytes.count >= Self.skippedPrefix + Self.windowSize else { continue }
            bytes.withUnsafeBytes { raw in
                for offset in Self.skippedPrefix...(bytes.count - Self.windowSize) { windows[Window(raw, at: offset)] = name }
            }
        }
        self.needles = needles
        self.windows = windows
    }

    /// One line per leak found: which secret or receipt, in which file and rendering.
    func scan(_ files: [(name: String, bytes: [UInt8], values: String)]) -> [String] {
        var leaks: [String] = []
        for file in files {
            let renderings = [
                ("raw", file.bytes), ("JSON-decoded", Array(file.values.utf8)), ("percent-decoded", Self.percentDecoded(file.bytes)),
            ]
            for (rendering, bytes) in renderings {
                for (name, needle) in needles where bytes.firstRange(of: needle) != nil {
                    leaks.append("\(file.name) (\(rendering)): \(name)")
                }
                guard bytes.count >= Self.windowSize else { continue }
                var found: Set<String> = []
                bytes.withUnsafeBytes { raw in
                    for offset in 0...(bytes.count - Self.windowSize) {
                        if let name = windows[Window(raw, at: offset)] { found.insert(name) }
                    }
                }
                for name in found.sorted() { leaks.append("\(file.name) (\(rendering)): 24 characters of receipt \(name)") }
            }
        }
        return leaks
    }

    /// `%XX` decoded wherever it is valid, everything else kept.
    static func percentDecoded(_ bytes: [UInt8]) -> [UInt8] {
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count, let high = hex(bytes[index + 1]), let low = hex(bytes[index + 2]) {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return out
    }
}

@Suite("The leak scanner of the log test")
struct LeakScannerTests {
    @Test("Finds a secret, a whole receipt, 24 characters of one, in raw, JSON-escaped or percent-encoded form")
    func finds() {
        let receipt = String((0..<400).map { _ in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".randomElement()! })
        let scanner = LeakScanner(secrets: ["secret": "s3cret-value"], receipts: ["r": receipt])
        func leaks(_ text: String, values: String = "") -> [String] { scanner.scan([("f", Array(text.utf8), values)]) }
        #expect(leaks(#"{"msg":"nothing here"}"#).isEmpty)
        #expect(leaks("x s3cret-value y") == ["f (raw): secret", "f (percent-decoded): secret"])
        #expect(leaks(String(receipt.dropFirst(100).prefix(24))).contains("f (raw): 24 characters of receipt r"))
        #expect(leaks(String(receipt.prefix(16 + 23))).isEmpty, "the shared header and less than 24 characters past it are not a leak")
        let slice = String(receipt.dropFirst(200).prefix(60))
        let escaped = slice.replacingOccurrences(of: "/", with: "\\/")
        #expect(leaks(escaped, values: slice).contains("f (JSON-decoded): 24 characters of receipt r"))
        let encoded = slice.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        #expect(leaks(encoded).contains("f (percent-decoded): 24 characters of receipt r"))
    }
}

extension String {
    /// Percent-encoded for an `application/x-www-form-urlencoded` value or a query.
    fileprivate var formEncoded: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }
}
