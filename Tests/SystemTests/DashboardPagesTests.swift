import Curl
import Foundation
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The dashboard's HTML pages against a running system, as a browser without script would use
/// them: cookies, forms, redirects. (scripts/browser-test drives the same pages in Chromium.)
@Suite("Dashboard pages: login, dead letters, retries, CSRF, escaping", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct DashboardPagesTests {
    /// A cookie jar over the system's HTTP client; never follows redirects.
    final class Browser {
        let client: HTTPClient
        let port: Int
        var cookies: [String: String] = [:]
        /// Sent with every request (say, the `X-Forwarded-For` of a proxy in front).
        var headers: [(name: String, value: String)] = []

        init(client: HTTPClient, port: Int) {
            self.client = client
            self.port = port
        }

        convenience init(_ system: TestSystem) { self.init(client: system.client, port: system.apiPort) }

        struct Page {
            var status: Int
            var headers: [(name: String, value: String)]
            var text: String
            func header(_ name: String) -> String? { headers.first { $0.name.lowercased() == name.lowercased() }?.value }
            var location: String? { header("Location") }
            /// The value of the first hidden `csrf` field.
            var csrf: String? {
                guard let range = text.range(of: #"name="csrf" value=""#) else { return nil }
                return String(text[range.upperBound...].prefix { $0 != "\"" })
            }
        }

        func get(_ path: String) async throws -> Page { try await send("GET", path, form: nil) }

        func post(_ path: String, _ form: [(String, String)], contentType: String = "application/x-www-form-urlencoded") async throws -> Page {
            try await send("POST", path, form: form, contentType: contentType)
        }

        private func send(_ method: String, _ path: String, form: [(String, String)]?, contentType: String = "") async throws -> Page {
            var headers = self.headers
            if !cookies.isEmpty { headers.append((name: "Cookie", value: cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; "))) }
            var body: [UInt8] = []
            if let form {
                headers.append((name: "Content-Type", value: contentType))
                var allowed = CharacterSet.alphanumerics
                allowed.insert(charactersIn: "-._~")
                body = Array(
                    form.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }.joined(separator: "&").utf8)
            }
            let response = try await client.sendNamingFailure(
                Curl.HTTPRequest(method: method, url: "http://127.0.0.1:\(port)\(path)", headers: headers, body: body))
            for header in response.headers where header.name.lowercased() == "set-cookie" {
                let pair = header.value.split(separator: ";")[0].split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(
                    String.init)
                if pair.count == 2 { cookies[pair[0]] = pair[1].isEmpty ? nil : pair[1] }
            }
            return Page(status: response.status, headers: response.headers, text: String(decoding: response.body, as: UTF8.self))
        }

        /// Logs in through the form, as an operator would.
        func logIn(username: String = "admin", password: String = "receiptq-dev") async throws -> Page {
            let form = try await get("/admin/login")
            return try await post("/admin/login", [("csrf", form.csrf ?? ""), ("username", username), ("password", password)])
        }
    }

    @Test("Every page needs a login; a wrong password is a 401, a forged form a 403, and the session cookie is HttpOnly and SameSite=Strict")
    func login() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let browser = Browser(system)
        for path in ["/admin", "/admin/dead", "/admin/retries", "/admin/dead/\(UUID())"] {
            let page = try await browser.get(path)
            #expect(page.status == 303 && page.location == "/admin/login")
            #expect(page.header("Content-Security-Policy")?.contains("default-src 'none'") == true)
        }
        // A POST without a session changes nothing and goes to the login form.
        #expect(try await browser.post("/admin/dead/delete", [("all", "1"), ("confirm", "1")]).location == "/admin/login")

        let form = try await browser.get("/admin/login")
        #expect(form.status == 200)
        #expect(form.header("Content-Type") == "text/html; charset=utf-8")
        #expect(form.header("Set-Cookie")?.contains("HttpOnly; SameSite=Strict") == true)
        #expect(!form.text.contains("<script"))
        let wrong = try await browser.post("/admin/login", [("csrf", form.csrf ?? ""), ("username", "admin"), ("password", "nope")])
        #expect(wrong.status == 401)
        #expect(wrong.text.contains("Wrong username or password."))
        #expect(browser.cookies["receiptq_admin"] == nil)
        // The login form's token is bound to its cookie: a form posted from elsewhere is refused.
        let stranger = Browser(system)
        let forged = try await stranger.post("/admin/login", [("csrf", form.csrf ?? ""), ("username", "admin"), ("password", "receiptq-dev")])
        #expect(forged.status == 403)
        #expect(stranger.cookies["receiptq_admin"] == nil)

        let loggedIn = try await browser.logIn()
        #expect(loggedIn.status == 303 && loggedIn.location == "/admin")
        let cookie = try #require(loggedIn.headers.first { $0.name.lowercased() == "set-cookie" && $0.value.hasPrefix("receiptq_admin=") }?.value)
        #expect(cookie.contains("Path=/admin; Max-Age=28800; HttpOnly; SameSite=Strict"))
        #expect(!cookie.contains("Secure"))  // development: plain HTTP on 127.0.0.1

        let overview = try await browser.get("/admin")
        #expect(overview.status == 200)
        #expect(overview.text.contains(#"id="queue-validate""#) && overview.text.contains(#"<svg class="chart""#))
        #expect(overview.text.contains(#"id="circuit">closed<"#))
        #expect(overview.header("Cache-Control") == "no-store" && overview.header("X-Frame-Options") == "DENY")
        #expect(!overview.text.contains("<script"))
        // A tampered session is no session.
        browser.cookies["receiptq_admin"] = browser.cookies["receiptq_admin"].map { String($0.dropLast()) + ($0.hasSuffix("0") ? "1" : "0") }
        #expect(try await browser.get("/admin").location == "/admin/login")

        // Logging out needs the form's token too, then the cookie is gone.
        let again = Browser(system)
        _ = try await again.logIn()
        let token = try #require(try await again.get("/admin").csrf)
        #expect(try await again.post("/admin/logout", [("csrf", "wrong")]).status == 403)
        let out = try await again.post("/admin/logout", [("csrf", token)])
        #expect(out.status == 303 && out.location == "/admin/login")
        #expect(again.cookies["receiptq_admin"] == nil)
    }

    @Test(
        "Dead letters from 21004: listed with <script> as text, filtered, shown with Apple's calls and no receipt; retried with the CSRF token only")
    func deadLetters() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        system.mock.state.setSharedSecret("rotated-at-apple", for: system.app.bundleID)
        var receipts: [String] = []
        var ids: [String] = []
        for user in ["alice", "<script>alert(1)</script>", "bob"] {
            let (receipt, _) = try system.forgeReceipt()
            receipts.append(receipt)
            let body = try JSONEncoder().encode(JSONValue.object(["receipt": .string(receipt), "user_identifier": .string(user)]))
            ids.append(try #require(try await system.post(String(decoding: body, as: UTF8.self)).1?["id"]?.stringValue).lowercased())
        }
        let browser = Browser(system)
        _ = try await browser.logIn()
        let filterPath = "/admin/dead?app_id=\(system.app.id.uuidString.lowercased())&error_code=shared_secret_mismatch"
        #expect(try await eventually { try await browser.get(filterPath).text.contains(#"<strong id="matching">3</strong>"#) })

        let list = try await browser.get(filterPath)
        #expect(list.status == 200)
        for id in ids { #expect(list.text.contains(#"value="\#(id)""#)) }
        #expect(list.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        #expect(!list.text.contains("<script"))
        #expect(!list.text.contains(receipts[0].prefix(40)))
        // The search narrows to one user; a filter on another code finds nothing.
        #expect(try await browser.get(filterPath + "&q=BOB").text.contains(#"<strong id="matching">1</strong>"#))
        #expect(try await browser.get("/admin/dead?app_id=\(system.app.id)&error_code=transport_timeout").text.contains(#"id="empty""#))
        // A bad filter is a clear 422 on the page, not a 500.
        let bad = try await browser.get("/admin/dead?app_id=nope")
        #expect(bad.status == 422 && bad.text.contains("app_id must be an app"))

        let detail = try await browser.get("/admin/dead/\(ids[1])")
        #expect(detail.status == 200)
        #expect(detail.text.contains(#"<td class="num apple-status">21004</td>"#))
        #expect(detail.text.contains("&lt;receipt: MII"))
        #expect(!detail.text.contains(receipts[1].prefix(64)) && !detail.text.contains(receipts[1].suffix(64)))
        #expect(!detail.text.contains("rotated-at-apple") && !detail.text.contains("integration-secret"))
        #expect(!detail.text.contains("<script"))
        #expect(try await browser.get("/admin/dead/\(UUID())").status == 404)

        // Without the token, with another session's token, or as JSON: refused, nothing moves.
        let token = try #require(list.csrf)
        let other = Browser(system)
        _ = try await other.logIn()
        let otherToken = try #require(try await other.get("/admin").csrf)
        let selection = [("all", "1"), ("app_id", system.app.id.uuidString)]
        #expect(try await browser.post("/admin/dead/retry", selection).status == 403)
        #expect(try await browser.post("/admin/dead/retry", [("csrf", otherToken)] + selection).status == 403)
        #expect(try await browser.post("/admin/dead/retry", [("csrf", token)] + selection, contentType: "application/json").status == 415)
        #expect(try await browser.get(filterPath).text.contains(#"<strong id="matching">3</strong>"#))
        // Delete all needs its confirmation box, even without the browser's `required` check.
        let unconfirmed = try await browser.post("/admin/dead/delete", [("csrf", token)] + selection)
        #expect(unconfirmed.location?.contains("done=unconfirmed") == true)
        #expect(try await browser.get(unconfirmed.location!).text.contains("Nothing was deleted"))
        #expect(try await browser.get(filterPath).text.contains(#"<strong id="matching">3</strong>"#))

        // The secret is right again at Apple; retry everything matching, as the bulk button does.
        system.mock.state.setSharedSecret("integration-secret", for: system.app.bundleID)
        let retried = try await browser.post(
            "/admin/dead/retry",
            [("csrf", token), ("all", "1"), ("app_id", system.app.id.uuidString.lowercased()), ("error_code", "shared_secret_mismatch")]
                + [("return_error_code", "shared_secret_mismatch")])
        #expect(retried.status == 303)
        #expect(retried.location == "/admin/dead?error_code=shared_secret_mismatch&done=retried&count=3")
        #expect(try await browser.get(retried.location!).text.contains("3 jobs sent back to the queue."))
        let validated = try await eventually {
            var all = true
            for id in ids { all = try await system.get(id).1?["validation_status"]?.stringValue == "valid" && all }
            return all
        }
        #expect(validated)
    }

    @Test("The overview lists each import of the last day: queued, stored, dead letters, duplicates, refusals and its state")
    func imports() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (first, _) = try system.forgeReceipt()
        let (second, _) = try system.forgeReceipt()
        let (third, _) = try system.forgeReceipt(mock: "status=21004")
        let body = #"[{"receipt":"\#(first)"},{"receipt":"\#(second)"},{"receipt":"\#(first)"},{"receipt":"\#(third)"},{"receipt":42}]"#
        let (status, answer) = try await system.post(body, path: BulkImportTests.batchPath)
        #expect(status == 200)
        let importID = try #require(answer?["import_id"]?.stringValue)
        let browser = Browser(system)
        _ = try await browser.logIn()
        // Two stored, the 21004 one buried (a configuration error): the import is finished.
        let finished = try await eventually(timeout: .seconds(30)) {
            let page = try await browser.get("/admin").text
            guard let range = page.range(of: #"data-import-id="\#(importID)""#) else { return false }
            return page[range.upperBound...].prefix(1_000).contains("finished")
        }
        #expect(finished)
        let page = try await browser.get("/admin").text
        let row = try #require(page.range(of: #"data-import-id="\#(importID)""#).map { String(page[$0.upperBound...].prefix { $0 != "\n" }) })
        let cells = row.components(separatedBy: "<td").dropFirst().map { cell in
            String(cell.drop { $0 != ">" }.dropFirst().prefix { $0 != "<" })
        }
        // Import, app, started, queued, stored, dead letters, duplicates, refused, …
        #expect(cells[1] == system.app.name)
        #expect(Array(cells[3...7]) == ["3", "2", "1", "1", "1"], "\(cells)")
        #expect(row.contains(#"class="num alarm">1<"#), "its dead letter stands out")
    }

    @Test("Redis unreachable: the login still works, every page and action answers 503 with Retry-After, never a 500")
    func redisDown() async throws {
        let configuration = try AppConfiguration(environment: [
            "HTTP_HOST": "127.0.0.1", "HTTP_PORT": "0", "REDIS_PORT": String(try freeLoopbackPort()), "REDIS_CONNECT_TIMEOUT_MS": "200",
            "RECEIPTQ_TRUST_ROOTS_DIR": try TestSystem.trustDirectory.get().path,
        ])
        let api = try await StandaloneAPI(configuration)
        let browser = Browser(client: try HTTPClient(options: CurlOptions(), lanes: 2), port: api.port)
        #expect(try await browser.logIn().location == "/admin")
        var token: String?
        for path in ["/admin", "/admin/dead", "/admin/retries?q=x", "/admin/dead/\(UUID())"] {
            let page = try await browser.get(path)
            #expect(page.status == 503, "GET \(path)")
            #expect(page.header("Retry-After") == "5" && page.text.contains("Redis or Postgres cannot be reached"), "GET \(path)")
            token = page.csrf
        }
        let csrf = try #require(token)
        for (path, form) in [
            ("/admin/dead/retry", [("all", "1")]), ("/admin/retries/delete", [("id", UUID().uuidString)]),
            ("/admin/dead/delete", [("all", "1"), ("confirm", "1")]),
        ] {
            let answer = try await browser.post(path, [("csrf", csrf)] + form)
            #expect(answer.status == 503, "POST \(path)")
            #expect(answer.text.contains("nothing was changed"), "POST \(path)")
        }
        await api.stop()
    }

    @Test("Retries: a job waiting in backoff is shown with its next run, and Retry now validates it at once; selected deletes remove only those")
    func retries() async throws {
        // A long backoff, so the job waits in the retry set until the operator acts.
        let system = try await TestSystem.start(environment: ["RETRY_BASE_MS": "600000"])
        defer { Task { await system.stop() } }
        system.mock.state.addRule(MockRule(bundleID: system.app.bundleID, status: 21005, times: 2))
        var ids: [String] = []
        for _ in 0..<2 {
            let (receipt, _) = try system.forgeReceipt()
            ids.append(try #require(try await system.post(#"{"receipt":"\#(receipt)"}"#).1?["id"]?.stringValue).lowercased())
        }
        let browser = Browser(system)
        _ = try await browser.logIn()
        let path = "/admin/retries?app_id=\(system.app.id.uuidString.lowercased())"
        #expect(try await eventually { try await browser.get(path).text.contains(#"<strong id="matching">2</strong>"#) })
        let list = try await browser.get(path)
        #expect(list.text.contains(">apple_21005</a>"))
        #expect(list.text.contains(#"<th>Runs</th>"#) && list.text.contains(" min</td>") && list.text.contains(">in "))
        #expect(list.text.contains(#"id="retry-selected">Retry now selected"#))
        let token = try #require(list.csrf)

        let detail = try await browser.get("/admin/retries/\(ids[0])")
        #expect(detail.text.contains(#"<td class="num apple-status">21005</td>"#))

        // Nothing ticked: a clear notice, nothing moved.
        let none = try await browser.post("/admin/retries/retry", [("csrf", token)])
        #expect(try await browser.get(none.location ?? "/").text.contains("Nothing was selected."))

        let now = try await browser.post("/admin/retries/retry", [("csrf", token), ("id", ids[0])])
        #expect(now.location == "/admin/retries?done=retried&count=1")
        #expect(try await eventually { try await system.get(ids[0]).1?["validation_status"]?.stringValue == "valid" })

        let deleted = try await browser.post("/admin/retries/delete", [("csrf", token), ("id", ids[1]), ("id", UUID().uuidString)])
        #expect(deleted.location == "/admin/retries?done=deleted&count=1")
        #expect(try await browser.get(path).text.contains(#"id="empty""#))
    }
}
