import Curl
import DevTools
import Foundation
import Hiredis
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// Named operator accounts (`receiptq operators`), their roles on the dashboard and the admin API,
/// and the audit log, against a running system, the built binary and real Postgres and Redis.
@Suite("Operators: named accounts, roles, the audit log", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct OperatorTests {
    typealias Browser = DashboardPagesTests.Browser
    static let password = "a long enough password"

    /// Runs `receiptq operators …` on the test database, the password on its environment variable.
    func operators(_ arguments: [String], password: String? = OperatorTests.password) async throws -> (status: Int32, output: String) {
        try await receiptq(["operators"] + arguments, environment: ["RECEIPTQ_OPERATOR_PASSWORD": password])
    }

    /// Runs `receiptq …` on the test database as the login `ci-operator`.
    func receiptq(_ arguments: [String], environment extra: [String: String?] = [:]) async throws -> (status: Int32, output: String) {
        var environment = ProcessInfo.processInfo.environment
        for (key, value) in [
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase, "USER": "ci-operator",
        ] {
            environment[key] = value
        }
        for (key, value) in extra { environment[key] = value }
        environment.removeValue(forKey: "SUDO_USER")
        let variables = environment
        return try await offload { try runProcess(ReceiptqExecutable.url, arguments, environment: variables) }
    }

    func send(
        _ system: TestSystem, _ method: String, _ path: String, user: String, password: String = OperatorTests.password, body: String = ""
    ) async throws -> AdminAPITests.Answer {
        let basic = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        return try await AdminAPITests().send(system, method, path, authorization: basic, body: body)
    }

    /// Two 21004 dead letters of `user`: Apple (the mock) wants another shared secret.
    func deadLetters(_ system: TestSystem, user: String) async throws -> [String] {
        system.mock.state.setSharedSecret("rotated-at-apple", for: system.app.bundleID)
        var ids: [String] = []
        for _ in 0..<2 {
            let (receipt, _) = try system.forgeReceipt()
            let body = try JSONEncoder().encode(JSONValue.object(["receipt": .string(receipt), "user_identifier": .string(user)]))
            ids.append(try #require(try await system.post(String(decoding: body, as: UTF8.self)).1?["id"]?.stringValue).lowercased())
        }
        let redis = try RedisConnection(configuration: system.configuration.redis)
        #expect(try await eventually { try redis.send(["ZCARD", system.configuration.keys.dead]).int == 2 })
        return ids
    }

    @Test("Accounts are scrypt-hashed; viewers look, operators retry, admins manage webhooks; every action is in the audit log")
    func roles() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let (viewer, operatorName, admin) = ("viewer-\(suffix)", "op-\(suffix)", "adm-\(suffix)")
        let customer = "audited-\(suffix)"
        let ids = try await deadLetters(system, user: customer)

        // The command line: three roles; the password comes from the environment, never an argument.
        for (name, role) in [(viewer, "viewer"), (operatorName, "operator"), (admin, "admin")] {
            let (status, output) = try await operators(["add", name.uppercased(), "--role", role])
            #expect(status == 0, "\(output)")
        }
        #expect(try await operators(["add", viewer]).output.contains("exists"))
        #expect(try await operators(["add", "short-\(suffix)"], password: "too short").output.contains("at least 12"))
        #expect(try await operators(["add", "ADMIN"]).output.contains("built-in admin"))
        #expect(try await operators(["add", "bad name \(suffix)"]).status != 0)
        let listed = try await operators(["list"]).output
        #expect(listed.contains("\(operatorName)  operator") && listed.contains("admin  admin  (built in"))
        let pg = try system.postgres()
        defer { pg.close() }
        let hash = try #require(
            try await pg.query("SELECT password_hash FROM operators WHERE username = \(viewer)").rows.first?.string("password_hash"))
        #expect(hash.hasPrefix("$scrypt$ln=15,r=8,p=1$") && !hash.contains(Self.password))

        // Viewers read, and are refused every action with a 403 that names the role it needs.
        #expect(try await send(system, "GET", "/admin/api/dead?limit=5", user: viewer).status == 200)
        #expect(try await send(system, "GET", "/admin/api/dead", user: viewer.uppercased()).status == 200, "names are case-insensitive")
        #expect(try await send(system, "GET", "/admin/api/dead", user: viewer, password: "a wrong password!").status == 401)
        let refused = try await send(system, "POST", "/admin/api/dead/retry", user: viewer, body: #"{"ids":["\#(ids[0])"]}"#)
        #expect(refused.status == 403 && refused.json?["reason"]?.stringValue == "needs the operator role")
        let refusedDelete = try await send(system, "POST", "/admin/api/dead/delete", user: viewer, body: #"{"ids":["\#(ids[1])"]}"#)
        #expect(refusedDelete.status == 403)
        let viewerBrowser = Browser(system)
        #expect(try await viewerBrowser.logIn(username: viewer, password: Self.password).location == "/admin")
        let deadPage = try await viewerBrowser.get("/admin/dead")
        #expect(deadPage.status == 200 && deadPage.text.contains("(viewer)"))
        #expect(!deadPage.text.contains("retry-selected") && deadPage.text.contains("viewer-note"))
        let forbidden = try await viewerBrowser.post("/admin/dead/retry", [("csrf", deadPage.csrf ?? ""), ("id", ids[0])])
        #expect(forbidden.status == 403 && forbidden.text.contains("needs operator"))

        // Operators retry; webhooks are the admins'.
        let retried = try await send(system, "POST", "/admin/api/dead/retry", user: operatorName, body: #"{"ids":["\#(ids[0])"]}"#)
        #expect(retried.status == 200 && retried.json?["retried"]?.intValue == 1)
        let hook = #"{"app_id":"\#(system.app.id.canonical)","url":"http://127.0.0.1:9/hook","allow_private":true,"events":["subscription.*"]}"#
        #expect(try await send(system, "POST", "/admin/api/webhooks", user: operatorName, body: hook).status == 403)

        // Admins register (the secret shown once), pause and list endpoints; bad ones are 422s.
        let added = try await send(system, "POST", "/admin/api/webhooks", user: admin, body: hook)
        #expect(added.status == 201 && added.json?["secret"]?.stringValue?.hasPrefix("whsec_") == true)
        let endpoint = try #require(added.json?["id"]?.stringValue)
        #expect(try await send(system, "POST", "/admin/api/webhooks/\(endpoint)/pause", user: admin).status == 200)
        let list = try await send(system, "GET", "/admin/api/webhooks?app_id=\(system.app.id.canonical)", user: viewer)
        let listedEndpoint = list.json?["endpoints"]?.arrayValue?.first { $0["id"]?.stringValue == endpoint }
        #expect(listedEndpoint?["state"]?.stringValue == "paused" && listedEndpoint?["secret"] == nil)
        for (body, field) in [
            (#"{"app_id":"\#(system.app.id.canonical)","url":"https://127.0.0.1/hook"}"#, "url"),
            // Loopback by name (RFC 6761), though neither resolves here.
            (#"{"app_id":"\#(system.app.id.canonical)","url":"https://localhost./hook"}"#, "url"),
            (#"{"app_id":"\#(system.app.id.canonical)","url":"https://foo.localhost/hook"}"#, "url"),
            (#"{"app_id":"\#(system.app.id.canonical)","url":"http://example.com/hook"}"#, "url"),
            (#"{"app_id":"\#(system.app.id.canonical)","url":"https://example.com/","events":["nonsense"]}"#, "events"),
            (#"{"url":"https://example.com/"}"#, "app_id"), (#"{"app_id":"\#(system.app.id.canonical)","url":"https://example.com/","x":1}"#, "x"),
        ] {
            let answer = try await send(system, "POST", "/admin/api/webhooks", user: admin, body: body)
            #expect(answer.status == 422 && answer.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == field, "\(body)")
        }
        #expect(try await send(system, "POST", "/admin/api/webhooks/\(UUID().uuidString)/remove", user: admin).status == 404)
        #expect(try await send(system, "POST", "/admin/api/webhooks/\(endpoint)/remove", user: admin).status == 200)

        // The audit log: who, what, how many jobs, whose, in order; the command line's changes too.
        let audit = try await send(system, "GET", "/admin/api/audit?actor=\(operatorName)", user: viewer).json?["entries"]?.arrayValue ?? []
        let retry = try #require(audit.first { $0["action"]?.stringValue == "dead.retry" })
        #expect(retry["job_count"]?.intValue == 1 && retry["outcome"]?.stringValue == "done" && retry["role"]?.stringValue == "operator")
        #expect(retry["source"]?.stringValue == "api" && retry["user_identifiers"]?.arrayValue == [.string(customer)])
        let adminLines = try await send(system, "GET", "/admin/api/audit?actor=\(admin)&action=webhook.", user: viewer).json?["entries"]?
            .arrayValue?.compactMap { $0["action"]?.stringValue }
        #expect(adminLines == ["webhook.remove", "webhook.pause", "webhook.add"])
        let cliLines = try await send(system, "GET", "/admin/api/audit?actor=cli:ci-operator&action=operator.add", user: viewer)
        #expect(cliLines.json?["entries"]?.arrayValue?.contains { $0["target"]?.stringValue == "\(admin) as admin" } == true)
        #expect(try await send(system, "GET", "/admin/api/audit?limit=0", user: viewer).status == 422)
        // The viewer's refused retries, at the API and on the dashboard: recorded, with where they came from.
        let denied =
            try await send(system, "GET", "/admin/api/audit?actor=\(viewer)&action=access.denied", user: viewer).json?["entries"]?
            .arrayValue ?? []
        #expect(
            Set(denied.compactMap { $0["target"]?.stringValue })
                == ["POST /admin/api/dead/retry", "POST /admin/api/dead/delete", "POST /admin/dead/retry"], "\(denied)")
        #expect(denied.allSatisfy { $0["outcome"]?.stringValue == "refused" && $0["client_address"]?.stringValue == "127.0.0.1" })
        #expect(retry["client_address"]?.stringValue == "127.0.0.1")

        // `receiptq apps` changes are audited too, a refused one as failed; passwords never are.
        let appName = "audited-app-\(suffix)"
        #expect(try await receiptq(["apps", "add", "--bundle-id", "com.example.audit.a\(suffix)", "--name", appName]).status == 0)
        let short = try await receiptq(
            ["apps", "softphone-credentials", "--name", appName, "--username", "phone-\(suffix)"],
            environment: ["RECEIPTQ_SOFTPHONE_PASSWORD": "short-pw"])
        #expect(short.status != 0 && short.output.contains("at least 12"), "\(short.output)")
        let phone = try await receiptq(
            ["apps", "softphone-credentials", "--name", appName, "--username", "phone-\(suffix)"],
            environment: ["RECEIPTQ_SOFTPHONE_PASSWORD": "a-long-softphone-password"])
        #expect(phone.status == 0, "\(phone.output)")
        // (The audit log outlives earlier runs: this run's lines are those naming its suffix.)
        let appLines =
            (try await send(system, "GET", "/admin/api/audit?actor=cli:ci-operator&action=app.", user: viewer).json?["entries"]?
            .arrayValue ?? []).filter { ($0["target"]?.stringValue ?? "").contains(suffix) }
        let summary = appLines.compactMap { line in
            line["action"]?.stringValue.map { "\($0) \(line["outcome"]?.stringValue ?? "")" }
        }
        #expect(summary == ["app.softphone_credentials.set done", "app.softphone_credentials.set failed", "app.add done"], "\(summary)")
        #expect(appLines.last?["target"]?.stringValue?.contains(appName) == true && appLines.last?["app_id"] == .null)
        #expect(appLines.first?["app_id"]?.stringValue != nil)
        #expect(!appLines.contains { ($0["target"]?.stringValue ?? "").contains("softphone-password") })

        // The customer view shows what was done to the customer's jobs, and who looked them up.
        let customerPage = try await viewerBrowser.get("/admin/customers?q=\(customer)")
        #expect(customerPage.status == 200 && customerPage.text.contains("customer-audit"))
        #expect(customerPage.text.contains("dead.retry") && customerPage.text.contains(operatorName))
        let auditPage = try await viewerBrowser.get("/admin/audit?action=customer.")
        #expect(auditPage.status == 200 && auditPage.text.contains("customer.lookup") && auditPage.text.contains("user \(customer)"))

        // A reset (here: a new role) ends the account's sessions at once; a removal ends its access.
        let operatorBrowser = Browser(system)
        #expect(try await operatorBrowser.logIn(username: operatorName, password: Self.password).location == "/admin")
        #expect(try await operatorBrowser.get("/admin/dead").text.contains("retry-selected"))
        #expect(try await operators(["reset", operatorName, "--role", "viewer", "--keep-password"]).status == 0)
        #expect(try await operatorBrowser.get("/admin/dead").location == "/admin/login")
        #expect(try await operatorBrowser.logIn(username: operatorName, password: Self.password).location == "/admin")
        #expect(!(try await operatorBrowser.get("/admin/dead").text.contains("retry-selected")), "the new role holds")
        #expect(try await operators(["remove", viewer]).status == 0)
        #expect(try await send(system, "GET", "/admin/api/dead", user: viewer).status == 401)
        #expect(try await viewerBrowser.get("/admin/dead").location == "/admin/login")
        // The built-in admin still works, as an admin.
        #expect(try await AdminAPITests().send(system, "GET", "/admin/api/webhooks").status == 200)
        let auditCommand = try await operators(["audit", "--actor", operatorName, "--limit", "5"]).output
        #expect(auditCommand.contains("dead.retry") && auditCommand.contains("jobs: 1"))
        for name in [operatorName, admin] { _ = try await operators(["remove", name]) }
    }

    @Test("No audit line, no action: with Postgres unreachable the built-in admin still reads, but a retry is a 503 and moves nothing")
    func auditUnavailable() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try await deadLetters(system, user: "unaudited")
        var configuration = system.configuration
        configuration.api.port = 0
        configuration.postgres.port = try freeLoopbackPort()
        let api = try await StandaloneAPI(configuration)
        defer { Task { await api.stop() } }
        let browser = Browser(client: system.client, port: api.port)
        #expect(try await browser.logIn().location == "/admin")
        let page = try await browser.get("/admin/dead")
        #expect(page.status == 200 && page.text.contains("retry-all"))
        let answer = try await browser.post("/admin/dead/retry", [("csrf", page.csrf ?? ""), ("all", "1")])
        #expect(answer.status == 503 && answer.text.contains("audit log cannot be written"))
        let basic = "Basic " + Data("admin:receiptq-dev".utf8).base64EncodedString()
        let viaAPI = try await system.client.send(
            Curl.HTTPRequest(
                method: "POST", url: "http://127.0.0.1:\(api.port)/admin/api/dead/retry",
                headers: [(name: "Authorization", value: basic), (name: "Content-Type", value: "application/json")],
                body: Array(#"{"all":true}"#.utf8)))
        #expect(viaAPI.status == 503)
        let redis = try RedisConnection(configuration: system.configuration.redis)
        #expect(try redis.send(["ZCARD", system.configuration.keys.dead]).int == 2, "nothing was retried")
        // Named accounts cannot be checked without Postgres: a 503, not a 401 or a 500.
        let named = "Basic " + Data("someone:\(Self.password)".utf8).base64EncodedString()
        let unreadable = try await system.client.send(
            Curl.HTTPRequest(method: "GET", url: "http://127.0.0.1:\(api.port)/admin/api/dead", headers: [(name: "Authorization", value: named)]))
        #expect(unreadable.status == 503)
    }
}

extension OperatorTests {
    @Test("The webhooks page: admins register (secret shown once, never in a URL), test, pause, rotate and remove; viewers see no form")
    func webhooksPage() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let receiver = WebhookReceiver(secret: "pending")
        let (url, task) = try await receiver.start(logger: WebhookTests.quiet)
        defer { task.cancel() }
        let admin = Browser(system)
        #expect(try await admin.logIn().location == "/admin")
        let empty = try await admin.get("/admin/webhooks")
        #expect(empty.status == 200 && empty.text.contains("add-webhook"))
        let form = [("csrf", empty.csrf ?? ""), ("app_id", system.app.id.canonical), ("events", "subscription.*, receipt.validated")]
        let refused = try await admin.post("/admin/webhooks/add", form + [("url", url)])
        #expect(refused.status == 422 && refused.text.contains("http:// only with"), "http to loopback needs private addresses allowed")
        let added = try await admin.post("/admin/webhooks/add", form + [("url", url), ("allow_private", "1"), ("description", "<b>ops</b>")])
        #expect(added.status == 200 && added.text.contains("new-secret") && !added.text.contains("<b>ops</b>"))
        let secret = try #require(added.text.range(of: #"id="secret-value">"#).map { String(added.text[$0.upperBound...].prefix { $0 != "<" }) })
        #expect(secret.hasPrefix("whsec_"))
        receiver.setSecret(secret)
        let endpoint = try #require(
            added.text.range(of: #"id="secret-endpoint">"#).map { String(added.text[$0.upperBound...].prefix { $0 != "<" }) })
        let listed = try await admin.get("/admin/webhooks")
        #expect(!listed.text.contains(secret), "the secret is shown once")
        #expect(listed.text.contains("subscription.*, receipt.validated") && listed.text.contains("&lt;b&gt;ops&lt;/b&gt;"))

        let tested = try await admin.post("/admin/webhooks/\(endpoint)/test", [("csrf", listed.csrf ?? "")])
        #expect(tested.status == 200 && tested.text.contains("Test delivery to \(endpoint): HTTP 2"), "\(tested.status) \(tested.text.prefix(3000))")
        #expect(receiver.deliveries.last?.type == "webhook.test" && receiver.deliveries.last?.signatureValid == true)
        let paused = try await admin.post("/admin/webhooks/\(endpoint)/pause", [("csrf", listed.csrf ?? "")])
        #expect(paused.status == 303 && paused.location == "/admin/webhooks?done=paused")
        #expect(try await admin.get(paused.location!).text.contains("outcome-paused"))
        let rotated = try await admin.post("/admin/webhooks/\(endpoint)/rotate-secret", [("csrf", listed.csrf ?? "")])
        #expect(rotated.text.contains("new-secret") && !rotated.text.contains(secret))
        #expect(
            try await admin.post("/admin/webhooks/\(endpoint)/remove", [("csrf", listed.csrf ?? "")]).location == "/admin/webhooks?done=unconfirmed")
        #expect(try await admin.post("/admin/webhooks/\(UUID())/pause", [("csrf", listed.csrf ?? "")]).status == 404)

        // A viewer sees the endpoint, no form, and is refused a forged one.
        let name = "hooks-viewer-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        #expect(try await operators(["add", name, "--role", "viewer"]).status == 0)
        let viewer = Browser(system)
        #expect(try await viewer.logIn(username: name, password: Self.password).location == "/admin")
        let seen = try await viewer.get("/admin/webhooks")
        #expect(seen.text.contains(endpoint) && !seen.text.contains("add-webhook") && !seen.text.contains("pause-\(endpoint)"))
        #expect(try await viewer.post("/admin/webhooks/\(endpoint)/remove", [("csrf", seen.csrf ?? ""), ("confirm", "1")]).status == 403)
        #expect(
            try await admin.post("/admin/webhooks/\(endpoint)/remove", [("csrf", listed.csrf ?? ""), ("confirm", "1")]).location
                == "/admin/webhooks?done=removed")
        let lines = try await send(system, "GET", "/admin/api/audit?actor=admin&action=webhook.", user: "admin", password: "receiptq-dev")
        let actions = lines.json?["entries"]?.arrayValue?.filter { $0["target"]?.stringValue?.hasPrefix(endpoint) == true }.compactMap {
            $0["action"]?.stringValue
        }
        #expect(actions == ["webhook.remove", "webhook.rotate_secret", "webhook.pause", "webhook.test", "webhook.add"])
        _ = try await operators(["remove", name])
    }
}
