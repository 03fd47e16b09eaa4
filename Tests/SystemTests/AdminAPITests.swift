import Curl
import Foundation
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The admin API against a running system: dead letters made by a mock App Store answering 21004,
/// listed, filtered, inspected (never the receipt), and retried once the secret is fixed.
@Suite("Admin API: dead letters, retries, overview", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct AdminAPITests {
    static let basic = "Basic " + Data("admin:receiptq-dev".utf8).base64EncodedString()

    struct Answer {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: [UInt8]
        var json: JSONValue? { try? JSONDecoder().decode(JSONValue.self, from: Data(body)) }
        func header(_ name: String) -> String? { headers.first { $0.name.lowercased() == name.lowercased() }?.value }
    }

    func send(
        _ system: TestSystem, _ method: String, _ path: String, authorization: String? = basic, contentType: String? = "application/json",
        body: String = ""
    ) async throws -> Answer {
        var headers: [(name: String, value: String)] = []
        if let authorization { headers.append((name: "Authorization", value: authorization)) }
        if let contentType, method == "POST" || method == "PUT" { headers.append((name: "Content-Type", value: contentType)) }
        let response = try await system.client.send(
            Curl.HTTPRequest(method: method, url: "http://127.0.0.1:\(system.apiPort)\(path)", headers: headers, body: Array(body.utf8)))
        return Answer(status: response.status, headers: response.headers, body: response.body)
    }

    @Test("21004 dead letters: listed and filtered, shown without the receipt, bulk-retried after the secret is fixed, then valid")
    func deadLettersRoundTrip() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        // Apple (the mock) now wants another secret: every receipt of the app fails with 21004.
        system.mock.state.setSharedSecret("rotated-at-apple", for: system.app.bundleID)
        var receipts: [String] = []
        var ids: [String] = []
        for user in ["alice", "bob", "<script>alert(1)</script>"] {
            let (receipt, _) = try system.forgeReceipt()
            receipts.append(receipt)
            let body = try JSONEncoder().encode(JSONValue.object(["receipt": .string(receipt), "user_identifier": .string(user)]))
            let (status, answer) = try await system.post(String(decoding: body, as: UTF8.self))
            #expect(status == 206)
            ids.append(try #require(answer?["id"]?.stringValue).lowercased())
        }
        let buried = try await eventually {
            try await send(system, "GET", "/admin/api/dead?app_id=\(system.app.id)").json?["total_matching"]?.intValue == 3
        }
        #expect(buried)

        // The burials were counted in the same transactions that made them: dead, and a configuration
        // error (21004 → shared_secret_mismatch). Summed over the hour, because the three may have
        // been settled on either side of a minute's end.
        let activity = try #require(try await send(system, "GET", "/admin/api/overview").json?["activity"]?.arrayValue)
        #expect(activity.count == 60)
        func total(_ group: String, _ name: String) -> Int { activity.reduce(0) { $0 + ($1[group]?[name]?.intValue ?? 0) } }
        #expect(total("outcomes", "dead") >= 3)
        #expect(total("failures", "configuration") >= 3)
        #expect(activity.contains { ($0["outcomes"]?["dead"]?.intValue ?? 0) > 0 && ($0["failures"]?["configuration"]?.intValue ?? 0) > 0 })

        let page = try await send(system, "GET", "/admin/api/dead?app_id=\(system.app.id)")
        #expect(page.status == 200)
        #expect(page.header("Cache-Control") == "no-store")
        #expect(page.header("Content-Security-Policy")?.contains("default-src 'none'") == true)
        let entries = try #require(page.json?["entries"]?.arrayValue)
        #expect(Set(entries.compactMap { $0["id"]?.stringValue }) == Set(ids))
        #expect(
            entries.allSatisfy {
                $0["error_code"]?.stringValue == FailureCode.sharedSecretMismatch.rawValue && $0["bundle_id"]?.stringValue == system.app.bundleID
            })
        // Filters: by error code, by a substring of the user, by another app.
        #expect(
            try await send(system, "GET", "/admin/api/dead?app_id=\(system.app.id)&error_code=shared_secret_mismatch").json?["total_matching"]?
                .intValue == 3)
        #expect(try await send(system, "GET", "/admin/api/dead?app_id=\(system.app.id)&error_code=timeout").json?["total_matching"]?.intValue == 0)
        #expect(try await send(system, "GET", "/admin/api/dead?app_id=\(system.app.id)&q=BOB").json?["total_matching"]?.intValue == 1)
        #expect(try await send(system, "GET", "/admin/api/dead?app_id=\(UUID())").json?["total_matching"]?.intValue == 0)
        // A search never looks into the receipt.
        #expect(
            try await send(
                system, "GET",
                "/admin/api/dead?app_id=\(system.app.id)&q=\(receipts[0].prefix(40).addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
            )
            .json?["total_matching"]?.intValue == 0)

        // The detail: envelope and audit trail, never the receipt.
        let detail = try await send(system, "GET", "/admin/api/dead/\(ids[2])")
        #expect(detail.status == 200)
        #expect(detail.json?["user_identifier"]?.stringValue == "<script>alert(1)</script>")
        #expect(detail.json?["envelope"]?["receipt"]?.stringValue?.hasPrefix("<receipt: ") == true)
        let history = try #require(detail.json?["history"]?.arrayValue)
        #expect(history.contains { $0["apple_status"]?.intValue == 21004 && $0["endpoint"]?.stringValue == "sandbox" })
        let text = String(decoding: detail.body, as: UTF8.self)
        #expect(!text.contains(receipts[2].prefix(64)))
        #expect(!text.contains("rotated-at-apple") && !text.contains("integration-secret"))

        // The fix at Apple's side is undone (the app's secret is right again); then one bulk retry.
        system.mock.state.setSharedSecret("integration-secret", for: system.app.bundleID)
        let retried = try await send(
            system, "POST", "/admin/api/dead/retry", body: #"{"all":true,"error_code":"shared_secret_mismatch","app_id":"\#(system.app.id)"}"#)
        #expect(retried.status == 200)
        #expect(retried.json?["retried"]?.intValue == 3)
        let validated = try await eventually {
            var all = true
            for id in ids { all = try await system.get(id).1?["validation_status"]?.stringValue == "valid" && all }
            return all
        }
        #expect(validated)
        #expect(try await send(system, "GET", "/admin/api/dead?app_id=\(system.app.id)").json?["total_matching"]?.intValue == 0)
        #expect(try await send(system, "GET", "/admin/api/dead/\(ids[0])").status == 404)
    }

    /// Runs the built `receiptq` binary with `arguments` against `system`'s admin API.
    func receiptq(_ system: TestSystem, _ arguments: [String], password: String? = nil) throws -> (status: Int32, output: String) {
        var environment = ProcessInfo.processInfo.environment
        environment["RECEIPTQ_ADMIN_URL"] = "http://127.0.0.1:\(system.apiPort)"
        environment["DASHBOARD_PASSWORD"] = password
        for (key, value) in [
            "POSTGRES_HOSTNAME": TestEnvironment.postgresHost, "POSTGRES_PORT": String(TestEnvironment.postgresPort),
            "POSTGRES_USER": TestEnvironment.postgresUser, "POSTGRES_DB": TestEnvironment.postgresDatabase,
        ] {
            environment[key] = value
        }
        return try runProcess(ReceiptqExecutable.url, arguments, environment: environment)
    }

    @Test("receiptq dlq: list by app name and error code, show without the receipt, retry --all, and refusals")
    func command() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        system.mock.state.setSharedSecret("rotated-at-apple", for: system.app.bundleID)
        let (receipt, _) = try system.forgeReceipt()
        let id = try #require(try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"cli-user"}"#).1?["id"]?.stringValue).lowercased()
        let buried = try await eventually {
            try await send(system, "GET", "/admin/api/dead").json?["total_matching"]?.intValue == 1
        }
        #expect(buried)

        let listed = try await offload { try receiptq(system, ["dlq", "list", "--app", system.app.name, "--error-code", "shared_secret_mismatch"]) }
        #expect(listed.status == 0)
        #expect(listed.output.contains(id) && listed.output.contains("1 shown of 1 matching"))
        let shown = try await offload { try receiptq(system, ["dlq", "show", id]) }
        #expect(shown.status == 0)
        #expect(shown.output.contains("\"apple_status\" : 21004"))
        #expect(!shown.output.contains(receipt.prefix(64)))
        let refused = try await offload { try receiptq(system, ["dlq", "list"], password: "wrong") }
        #expect(refused.status != 0 && refused.output.contains("refused the credentials"))
        #expect(try await offload { try receiptq(system, ["dlq", "retry"]) }.status != 0)

        system.mock.state.setSharedSecret("integration-secret", for: system.app.bundleID)
        let retried = try await offload { try receiptq(system, ["dlq", "retry", "--all", "--app", system.app.name]) }
        #expect(retried.status == 0 && retried.output.contains("Retried 1."))
        #expect(try await eventually { try await system.get(id).1?["validation_status"]?.stringValue == "valid" })
    }

    @Test("No credentials or wrong ones: a bare 401 with a Basic challenge, and the security headers")
    func authentication() async throws {
        // Eighteen refusals from one address: the throttle (DoorThrottleTests) is set out of the way.
        let system = try await TestSystem.start(environment: ["AUTH_THROTTLE_FREE_FAILURES": "1000"])
        defer { Task { await system.stop() } }
        let wrong = "Basic " + Data("admin:nope".utf8).base64EncodedString()
        let user = "Basic " + Data("root:receiptq-dev".utf8).base64EncodedString()
        for authorization in [nil, wrong, user, "Bearer \(system.token)", "Basic !!!", "Basic"] {
            for (method, path) in [("GET", "/admin/api/overview"), ("GET", "/admin/api/dead"), ("POST", "/admin/api/dead/delete")] {
                let answer = try await send(system, method, path, authorization: authorization, body: #"{"all":true}"#)
                #expect(answer.status == 401)
                #expect(answer.json == .object(["error": .string("unauthorized")]))
                #expect(answer.header("WWW-Authenticate")?.hasPrefix("Basic") == true)
                #expect(answer.header("Content-Security-Policy") != nil)
            }
        }
    }

    @Test("Bad requests: 415 for a form post (the CSRF guard), 422 naming the field, 404 for unknown sets and ids")
    func badRequests() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        #expect(
            try await send(system, "POST", "/admin/api/dead/delete", contentType: "application/x-www-form-urlencoded", body: "all=true").status == 415
        )
        #expect(try await send(system, "POST", "/admin/api/dead/retry", contentType: "text/plain", body: #"{"all":true}"#).status == 415)
        for (body, field) in [
            ("{}", "ids"), (#"{"ids":[]}"#, "ids"), (#"{"ids":["not-an-id"]}"#, "ids"), (#"{"all":true,"app_id":"x"}"#, "app_id"),
            ("[1]", "body"), ("nope", "body"),
        ] {
            let answer = try await send(system, "POST", "/admin/api/dead/retry", body: body)
            #expect(answer.status == 422)
            #expect(answer.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == field)
        }
        for query in ["limit=0", "limit=501", "offset=-1", "app_id=zzz"] {
            #expect(try await send(system, "GET", "/admin/api/retries?\(query)").status == 422)
        }
        #expect(try await send(system, "GET", "/admin/api/queue").status == 404)
        #expect(try await send(system, "GET", "/admin/api/dead/\(UUID())").status == 404)
        #expect(try await send(system, "GET", "/admin/api/dead/not-an-id").status == 404)
        #expect(try await send(system, "POST", "/admin/api/dead/delete", body: #"{"ids":["\#(UUID())"]}"#).json?["deleted"]?.intValue == 0)
    }

    @Test("Redis unreachable: every admin route answers 503 with Retry-After, never a 500")
    func redisDown() async throws {
        let configuration = try AppConfiguration(environment: [
            "HTTP_HOST": "127.0.0.1", "HTTP_PORT": "0", "REDIS_PORT": String(try freeLoopbackPort()), "REDIS_CONNECT_TIMEOUT_MS": "200",
            "RECEIPTQ_TRUST_ROOTS_DIR": try TestSystem.trustDirectory.get().path,
        ])
        let api = try await StandaloneAPI(configuration)
        let port = api.port
        let client = try HTTPClient(options: CurlOptions(), lanes: 2)
        for (method, path, body) in [
            ("GET", "/admin/api/overview", ""), ("GET", "/admin/api/dead", ""), ("GET", "/admin/api/retries/\(UUID())", ""),
            ("POST", "/admin/api/dead/retry", #"{"all":true}"#), ("POST", "/admin/api/retries/delete", #"{"ids":["\#(UUID())"]}"#),
        ] {
            var headers = [(name: "Authorization", value: Self.basic)]
            if method == "POST" { headers.append((name: "Content-Type", value: "application/json")) }
            let response = try await client.send(
                Curl.HTTPRequest(method: method, url: "http://127.0.0.1:\(port)\(path)", headers: headers, body: Array(body.utf8)))
            #expect(response.status == 503, "\(method) \(path)")
            #expect(response.headers.contains { $0.name.lowercased() == "retry-after" }, "\(method) \(path)")
        }
        await api.stop()
    }

    @Test("The overview: queue depths, dead letters and the live worker")
    func overview() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let live = try await eventually {
            !(try await send(system, "GET", "/admin/api/overview").json?["workers"]?.arrayValue?.isEmpty ?? true)
        }
        #expect(live)
        let answer = try await send(system, "GET", "/admin/api/overview")
        #expect(answer.json?["queues"]?["validate"]?.intValue != nil)
        #expect(answer.json?["queues"]?["repoll"]?.intValue != nil)
        #expect(answer.json?["dead"]?.intValue == 0)
        let worker = try #require(answer.json?["workers"]?.arrayValue?.first)
        #expect(worker["pid"]?.intValue == Int(ProcessInfo.processInfo.processIdentifier))
        #expect(worker["last_heartbeat_at"]?["ms"]?.intValue != nil)
        // Apple (the mock) is fine: the circuit is closed, with no open period.
        #expect(answer.json?["circuit"]?["state"]?.stringValue == "closed")
        #expect(answer.json?["circuit"]?["open_until"] == .null)
        #expect(answer.json?["circuit"]?["failed_probes"]?.intValue == 0)
        // The last hour, minute by minute, every counter present even when nothing happened.
        let activity = try #require(answer.json?["activity"]?.arrayValue)
        #expect(activity.count == 60)
        let minutes = activity.compactMap { $0["minute"]?["ms"]?.intValue }
        #expect(minutes.count == 60 && minutes == minutes.sorted() && Set(minutes.map { $0 % 60_000 }) == [0])
        let last = try #require(activity.last)
        #expect(Set(last["outcomes"]?.objectValue?.keys.map { $0 } ?? []) == ["validated", "invalid", "retried", "dead", "deferred"])
        #expect(
            Set(last["failures"]?.objectValue?.keys.map { $0 } ?? []) == ["network", "apple_http", "apple_status", "configuration", "store", "other"])
    }
}
