import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@testable import Dashboard

@Suite("Dashboard sessions: signed cookies, CSRF tokens, the login throttle")
struct AdminSessionTests {
    let credentials = AdminCredentials(username: "ops", password: "correct horse battery")
    let secret = Array("a-secret-shared-by-every-api-replica".utf8)
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let alice = Operator(username: "alice", role: .operator, generation: 3)

    @Test("A session verifies until it expires; any changed byte, another password or another secret refuses it")
    func sessionCookie() {
        let sessions = AdminSessions(credentials: credentials, secret: secret, lifetime: .seconds(3600), secureCookies: true)
        let (cookie, session) = sessions.issue(for: alice, now: now)
        #expect(sessions.verify(cookie, now: now) == session)
        #expect(session.username == "alice" && session.generation == 3)
        #expect(sessions.verify(cookie, now: now.addingTimeInterval(3599)) == session)
        #expect(sessions.verify(cookie, now: now.addingTimeInterval(3600)) == nil)
        // Pushing the expiry out breaks the signature.
        var parts = cookie.split(separator: ".").map(String.init)
        parts[2] = String(Int(parts[2])! + 86_400)
        #expect(sessions.verify(parts.joined(separator: "."), now: now) == nil)
        var flipped = Array(cookie)
        flipped[flipped.count - 1] = flipped.last == "0" ? "1" : "0"
        #expect(sessions.verify(String(flipped), now: now) == nil)
        // Another name or generation in the cookie breaks the signature: a session cannot be moved to another account.
        var renamed = cookie.split(separator: ".").map(String.init)
        renamed[4] = "61646d696e"  // "admin"
        #expect(sessions.verify(renamed.joined(separator: "."), now: now) == nil)
        var regenerated = cookie.split(separator: ".").map(String.init)
        regenerated[3] = "0"
        #expect(sessions.verify(regenerated.joined(separator: "."), now: now) == nil)
        for junk in ["", "v1", "v1.x.y.z", "v2.x.1.1.zz.y", String(repeating: "a", count: 600), cookie + "."] {
            #expect(sessions.verify(junk, now: now) == nil)
        }
        // A new password or a new secret ends every session signed before.
        let rotated = AdminSessions(
            credentials: AdminCredentials(username: "ops", password: "a brand new password"), secret: secret, secureCookies: true)
        #expect(rotated.verify(cookie, now: now) == nil)
        let otherSecret = AdminSessions(credentials: credentials, secret: Array("another-secret-of-thirty-two-characters".utf8), secureCookies: true)
        #expect(otherSecret.verify(cookie, now: now) == nil)
        // Replicas sharing the secret accept each other's sessions.
        let replica = AdminSessions(credentials: credentials, secret: secret, secureCookies: true)
        #expect(replica.verify(cookie, now: now) == session)
        // Without a secret each process has its own key.
        let a = AdminSessions(credentials: credentials, secret: nil, secureCookies: false)
        let b = AdminSessions(credentials: credentials, secret: nil, secureCookies: false)
        #expect(b.verify(a.issue(for: alice, now: now).value, now: now) == nil)
    }

    @Test("CSRF tokens belong to one session; the login form's token to its cookie's nonce")
    func csrfTokens() {
        let sessions = AdminSessions(credentials: credentials, secret: secret, secureCookies: true)
        let first = sessions.issue(for: alice, now: now).session
        let second = sessions.issue(for: alice, now: now).session
        let token = sessions.csrfToken(for: first)
        #expect(sessions.verifyCSRF(token, session: first))
        #expect(!sessions.verifyCSRF(token, session: second))
        #expect(!sessions.verifyCSRF(nil, session: first))
        #expect(!sessions.verifyCSRF("", session: first))
        #expect(!sessions.verifyCSRF(String(token.dropLast()), session: first))

        let (nonce, loginToken) = sessions.loginChallenge()
        #expect(sessions.verifyLogin(token: loginToken, nonce: nonce))
        #expect(!sessions.verifyLogin(token: loginToken, nonce: sessions.loginChallenge().nonce))
        #expect(!sessions.verifyLogin(token: loginToken, nonce: nil))
        #expect(!sessions.verifyLogin(token: nil, nonce: nonce))
    }

    @Test("Cookies are HttpOnly, SameSite=Strict, scoped to /admin; Secure when configured")
    func cookieAttributes() {
        let secure = AdminSessions(credentials: credentials, secret: secret, secureCookies: true).cookie("receiptq_admin", "v", maxAge: 60)
        #expect(secure == "receiptq_admin=v; Path=/admin; Max-Age=60; HttpOnly; SameSite=Strict; Secure")
        let plain = AdminSessions(credentials: credentials, secret: secret, secureCookies: false).cookie("receiptq_admin", "v", maxAge: 60)
        #expect(!plain.contains("Secure"))
        #expect(cookieValue("receiptq_admin", in: "a=1; receiptq_admin=v1.x; receiptq_login=n") == "v1.x")
        #expect(cookieValue("receiptq_admin", in: "receiptq_admin_other=1") == nil)
        #expect(cookieValue("receiptq_admin", in: nil) == nil)
    }

    @Test("While throttled, even the built-in admin's right password is not told apart from a wrong one, from that address only; Basic headers parse")
    func authenticatorThrottle() async {
        let log = RecordingAuthenticationLog()
        let policy = GuessingPolicy(freeFailuresPerAddress: 5, firstLockout: .seconds(6))
        let authenticator = OperatorAuthenticator(
            builtIn: credentials, directory: nil, gate: .local(policy: policy, log: log), proxies: TrustedProxies(header: nil))
        let admin = Operator(username: "ops", role: .admin, generation: 0, address: "203.0.113.9")
        func login(_ password: String, from address: String = "203.0.113.9", at time: Date? = nil) async -> OperatorAuthenticator.Outcome {
            await authenticator.authenticate(username: "ops", password: password, door: .dashboardLogin, address: address, now: time ?? now)
        }
        #expect(await login("correct horse battery") == .granted(admin))
        for _ in 0..<5 { #expect(await login("a wrong guess") == .refused) }
        // The sixth failure closes the address for the first lock-out, and says so at once.
        #expect(await login("a wrong guess") == .throttled(6))
        #expect(await login("correct horse battery") == .throttled(6))
        // Another address is not refused for this one's failures.
        var elsewhere = admin
        elsewhere.address = "198.51.100.7"
        #expect(await login("correct horse battery", from: "198.51.100.7") == .granted(elsewhere))
        let basic = "Basic " + Data("ops:correct horse battery".utf8).base64EncodedString()
        #expect(
            await authenticator.authenticate(authorization: basic, door: .adminAPI, address: "203.0.113.9", now: now.addingTimeInterval(6))
                == .granted(admin))
        #expect(AdminCredentials.basic(basic).map { [$0.username, $0.password] } == ["ops", "correct horse battery"])
        for junk in [nil, "", "Bearer x", "Basic !!!", "Basic " + Data("no-colon".utf8).base64EncodedString()] {
            #expect(AdminCredentials.basic(junk) == nil)
        }
        // Every refusal and throttling was reported with the door, address and account; never the password.
        let refusals = log.recorded.filter { $0.outcome != .granted }
        #expect(refusals.count == 7)
        #expect(refusals.allSatisfy { $0.attempt.account == "ops" && $0.attempt.door == .dashboardLogin })
        #expect(refusals.filter { $0.outcome == .refused(.wrongSecret) }.count == 6)
    }
}

@Suite("Dashboard forms, redirects and the chart")
struct DashboardFormTests {
    @Test("Form bodies: repeated names, + and percent-encoding, empty and odd pairs")
    func formFields() {
        let form = FormFields("csrf=abc&id=1&id=2&q=a+b%26c%3D&empty=&flag&%ZZ=bad")
        #expect(form["csrf"] == "abc")
        #expect(form.all("id") == ["1", "2"])
        #expect(form["q"] == "a b&c=")
        #expect(form["empty"] == "")
        #expect(form["flag"] == "")
        #expect(form["missing"] == nil)
        #expect(FormFields("").all("id").isEmpty)
    }

    @Test("An action's redirect keeps the list's filter, encoded; its notice is a fixed text")
    func redirects() {
        let form = FormFields("return_error_code=shared_secret_mismatch&return_q=%3Cscript%3E%26x&return_app_id=")
        let url = AdminPages.returnURL(.dead, form: form, done: "retried", count: 3)
        #expect(url == "/admin/dead?error_code=shared_secret_mismatch&q=%3Cscript%3E%26x&done=retried&count=3")
        #expect(AdminPages.returnURL(.retry, form: FormFields(""), done: "none") == "/admin/retries?done=none")
    }

    @Test("The chart: one bar segment per non-zero count, a round axis, every label escaped")
    func chart() {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        var minutes = (0..<60).map { ActivityMinute(minute: start.addingTimeInterval(Double($0) * 60), tally: ActivityTally()) }
        minutes[59].tally.add(.validated)
        minutes[59].tally.add(.validated)
        minutes[59].tally.add(.dead, failure: .sharedSecretMismatch)
        minutes[10].tally.add(.retried, failure: .transport(.timeout))
        let svg = ActivityChart.svg(minutes)
        #expect(svg.components(separatedBy: "<rect").count - 1 == 3)
        #expect(svg.contains(#"class="s-validated""#) && svg.contains(#"class="s-configuration""#) && svg.contains(#"class="s-network""#))
        #expect(svg.contains(">now</text>") && svg.contains(">-45m</text>"))
        #expect(!svg.contains("style="))
        let legend = ActivityChart.legend(minutes)
        #expect(legend.first { $0["name"] as? String == "validated" }?["total"] as? Int == 2)
        #expect(legend.first { $0["name"] as? String == "configuration" }?["total"] as? Int == 1)
        #expect(ActivityChart.niceCeiling(0) == 4)
        #expect(ActivityChart.niceCeiling(7) == 10)
        #expect(ActivityChart.niceCeiling(43) == 50)
        #expect(ActivityChart.niceCeiling(101) == 200)
        #expect(ActivityChart.niceCeiling(2500) == 5000)
        #expect(ActivityChart.escape(#"<script>"x" & 'y'"#) == "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;")
        #expect(ActivityChart.svg([]).hasSuffix("</svg>"))
    }

    @Test("Relative times read as an operator scans them")
    func relativeTimes() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(AdminPages.relative(now.addingTimeInterval(-5), now: now) == "5 s ago")
        #expect(AdminPages.relative(now.addingTimeInterval(-600), now: now) == "10 min ago")
        #expect(AdminPages.relative(now.addingTimeInterval(7200), now: now) == "in 2 h")
        #expect(AdminPages.relative(now.addingTimeInterval(-3 * 86_400), now: now) == "3 d ago")
        #expect(AdminPages.relative(nil, now: now) == "—")
        #expect(AdminPages.utc(Date(timeIntervalSince1970: 1_519_641_347)) == "2018-02-26 10:35:47")
    }
}

@Suite("The overview's verifyReceipt banner")
struct VerifyReceiptBannerTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("Nothing while verifyReceipt answers and announces nothing; an alarm once gone or past its sunset; a warning within 90 days")
    func levels() throws {
        #expect(AdminPages.verifyReceiptBanner(VerifyReceiptLifecycle(), now: now) == nil)
        let gone = try #require(AdminPages.verifyReceiptBanner(VerifyReceiptLifecycle(goneSince: now.addingTimeInterval(-60)), now: now))
        #expect(gone["level"] as? String == "alarm")
        #expect((gone["text"] as? String)?.contains("receiptq apps server-api-key") == true)
        let past = try #require(AdminPages.verifyReceiptBanner(VerifyReceiptLifecycle(sunset: now.addingTimeInterval(-1)), now: now))
        #expect(past["level"] as? String == "alarm")
        let near = try #require(AdminPages.verifyReceiptBanner(VerifyReceiptLifecycle(sunset: now.addingTimeInterval(30 * 86_400)), now: now))
        #expect(near["level"] as? String == "warning")
        #expect((near["text"] as? String)?.contains("in 30 days") == true)
        let far = VerifyReceiptLifecycle(deprecation: now.addingTimeInterval(-86_400), sunset: now.addingTimeInterval(400 * 86_400))
        #expect(AdminPages.verifyReceiptBanner(far, now: now)?["level"] as? String == "notice")
        #expect(AdminPages.verifyReceiptBanner(VerifyReceiptLifecycle(sunset: now.addingTimeInterval(400 * 86_400)), now: now) == nil)
    }
}

@Suite("The overview's Redis card")
struct RedisReplicationCardTests {
    @Test("No replicas is a single Redis, not an alarm; replicas show their worst lag, an alarm past 5 s")
    func card() {
        let single = AdminPages.replicationValues(ReplicationStatus())
        #expect(single["redisReplicas"] as? String == "none")
        #expect(single["redisLagAlarm"] as? Bool == false)
        let following = AdminPages.replicationValues(ReplicationStatus(replicas: 2, lagSeconds: 1, lagBytes: 0))
        #expect(following["redisReplicas"] as? String == "2")
        #expect(following["redisReplicasDetail"] as? String == "online, the worst 1 s behind")
        #expect(following["redisLagAlarm"] as? Bool == false)
        let lagging = AdminPages.replicationValues(ReplicationStatus(replicas: 1, lagSeconds: 9, lagBytes: 4096))
        #expect(lagging["redisReplicasDetail"] as? String == "online, the worst 9 s, 4096 bytes behind")
        #expect(lagging["redisLagAlarm"] as? Bool == true)
    }
}
