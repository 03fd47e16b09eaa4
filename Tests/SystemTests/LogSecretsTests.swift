import Curl
import DevTools
import Foundation
import IngestAPI
import Libpq
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The logs of a whole run, as an operator's log collector gets them: `receiptq migrate`, `apps`,
/// `serve`, `work`, `schedule` and `dlq` as separate processes with `LOG_FORMAT=json LOG_LEVEL=trace`,
/// every stdout and stderr captured to a file. A realistic session goes through them (real Apple
/// receipts and forged ones, a wrong token, bad input, a shared secret Apple refuses, dead letters
/// retried from the dashboard, the Cloud Softphone service); then every line must be a JSON object,
/// and no receipt, shared secret, token, password or session cookie may appear anywhere.
@Suite("Logs of a whole run: JSON lines, no secrets, no receipts", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct LogSecretsTests {
    /// The real receipts sent (from the shared corpus, when it is there) and their bundle ids:
    /// the first three belong to the app whose secret Apple takes, the last to the one it refuses.
    static let realReceipts = [
        ("revenuecat-sandboxReceipt", "com.revenuecat.sampleapp"), ("kvitto-sandboxReceipt", "com.cocoanetics.EmmiView"),
        ("tpinappreceipt-production", "org.getpure.pure-iphone"), ("aporat-example-itunes-receipt", "com.dashedspace.analytics"),
    ]

    @Test("A whole session at trace level: every line is JSON with ts/level/logger/msg, and no secret or receipt is in any log")
    func wholeRun() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ReceiptqExecutable.url.path), "build receiptq first (swift build)")
        let run = try await LoggedRun.start(
            realBundles: (accepted: Self.realReceipts.dropLast().map(\.1), refused: [Self.realReceipts.last!.1]))
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
            "Worker started", "Receipt submitted", "Authentication refused", "Receipt request refused", "Job stored",
            "Job scheduled for a retry", "Job moved to the dead letters", "Admin login", "Admin action",
            "Softphone purchase answered",
        ] {
            #expect(logs.messages.contains(message), "no \(message) in the logs")
        }
        #expect(logs.levels.contains("trace") && logs.levels.contains("debug"))
        // Refused credentials are security events: at notice, with the door, the client and the
        // account tried, at every door this run knocked on with a wrong one.
        let refusals = logs.files.flatMap { file in
            String(decoding: file.bytes, as: UTF8.self).split(separator: "\n").filter { $0.contains(#""msg":"Authentication refused""#) }
        }
        #expect(refusals.allSatisfy { $0.contains(#""level":"notice""#) && $0.contains("client.address") })
        for door in ["client_token", "dashboard_login", "admin_api", "softphone"] {
            #expect(refusals.contains { $0.contains(#""auth.door":"\#(door)""#) }, "no refusal logged at \(door)")
        }
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
        let buried = try await eventually(timeout: .seconds(30), interval: .milliseconds(100)) {
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
                let valid = try await eventually(timeout: .seconds(30), interval: .milliseconds(100)) {
                    try await run.get("/client/itunes_connect/receipts/\(id)", token: token).1?["validation_status"]?.stringValue == "valid"
                }
                #expect(valid, "receipt \(id) is validated")
            }
        }
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
