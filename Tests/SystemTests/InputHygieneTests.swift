import Curl
import Foundation
import Hiredis
import IngestAPI
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// "A 2xx means it will be stored", at every front door of a real system: the hostile strings the
/// hygiene gate refuses never reach a handler, and none of them is answered 5xx.
@Suite(
    "Input hygiene at every door: 422 naming the field, never a 5xx, never a 2xx for what cannot be stored", .blockingWork,
    .enabled(if: TestEnvironment.integrationEnabled))
struct InputHygieneTests {
    static let adminBasic = "Basic " + Data("admin:receiptq-dev".utf8).base64EncodedString()

    func send(
        _ system: TestSystem, _ method: String, _ path: String, headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) async throws -> (status: Int, body: [UInt8], headers: Curl.HTTPResponse) {
        let response = try await system.client.send(
            Curl.HTTPRequest(method: method, url: "http://127.0.0.1:\(system.apiPort)\(path)", headers: headers, body: body))
        return (response.status, response.body, response)
    }

    static func field(_ body: [UInt8]) -> String? {
        (try? JSONDecoder().decode(JSONValue.self, from: Data(body)))?["errors"]?.arrayValue?.first?["field"]?.stringValue
    }

    @Test(
        "The issue's requests: NUL in user_identifier or metadata is 422 before anything is queued; a NUL user in the entitlement query is 422, not 503"
    )
    func reportedRequests() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0"])
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let (status, answer) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"nul\u0000user"}"#)
        #expect(status == 422)
        #expect(answer?["errors"]?.arrayValue?.first?["field"]?.stringValue == "user_identifier")
        #expect(answer?["errors"]?.arrayValue?.first?["reason"]?.stringValue?.contains("U+0000") == true)
        let (metaStatus, metaAnswer) = try await system.post(#"{"receipt":"\#(receipt)","metadata":{"campaign":"a\u0000"}}"#)
        #expect(metaStatus == 422)
        #expect(metaAnswer?["errors"]?.arrayValue?.first?["field"]?.stringValue == "metadata.campaign")

        let (getStatus, getAnswer) = try await system.get(path: "/client/subscriptions?user_identifier=a%00b")
        #expect(getStatus == 422)
        #expect(getAnswer?["errors"]?.arrayValue?.first?["field"]?.stringValue == "user_identifier")
        #expect(try await system.get(path: "/client/subscriptions/1000%00x").0 == 422)

        // Nothing was queued: the refused receipt never cost an Apple call, and the same receipt
        // sent clean is a new receipt (no idempotency key was taken by the refused ones).
        #expect(system.mock.state.requestCount(.production) + system.mock.state.requestCount(.sandbox) == 0)
        let redis = try system.redis()
        defer { redis.close() }
        #expect(try redis.send(["LLEN", system.configuration.keys.queue("validate")]).int == 0)
        #expect(try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"clean"}"#).0 / 100 == 2)
        // Queued behind anything the refused ones could have left: once it is settled and nothing
        // is left, the workers settled one job, the clean one.
        #expect(try await eventually { try system.jobsSettled >= 1 && system.queuesIdle([.validate]) })
        #expect(system.jobsSettled == 1, "only the clean receipt was ever a job")
    }

    @Test("Each door answers in its own format: the softphone with final=1, the dashboard pages as text, the admin API as JSON")
    func eachDoorsFormat() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0"])
        defer { Task { await system.stop() } }
        let form = [(name: "Content-Type", value: "application/x-www-form-urlencoded")]

        let softphone = try await send(system, "POST", SoftphoneService.path, headers: form, body: Array("receipt=x&productCode=a%00b".utf8))
        #expect(softphone.status == 422)
        let reply = String(decoding: softphone.body, as: UTF8.self)
        #expect(reply.contains("final") && reply.contains("1") && reply.contains("productCode"), "\(reply)")
        let softJSON = try await send(
            system, "POST", SoftphoneService.path, headers: [(name: "Content-Type", value: "application/json")],
            body: Array(#"{"receipt":"x","productCode":"\ud800"}"#.utf8))
        #expect(softJSON.status == 422)
        #expect(String(decoding: softJSON.body, as: UTF8.self).contains("productCode"))

        let api = try await send(system, "GET", "/admin/api/dead?q=%00", headers: [(name: "Authorization", value: Self.adminBasic)])
        #expect(api.status == 422)
        #expect(Self.field(api.body) == "q")

        let login = try await send(system, "POST", "/admin/login", headers: form, body: Array("username=ad%00min&password=x&csrf=y".utf8))
        #expect(login.status == 422)
        #expect(String(decoding: login.body, as: UTF8.self).hasPrefix("username: "))
        #expect(login.headers.header("Content-Security-Policy") != nil, "the dashboard's security headers")

        let receiptByID = try await send(
            system, "GET", "/client/itunes_connect/receipts/%C0%80", headers: [(name: "Authorization", value: "Bearer \(system.token)")])
        #expect(receiptByID.status == 422)
        #expect(Self.field(receiptByID.body) == "path")
    }

    /// Hostile JSON string literals (as they appear in a body) and whether Postgres could store them.
    static let hostileStrings: [(json: [UInt8], storable: Bool)] = [
        (Array(#""nul\u0000""#.utf8), false), (Array(#""\ud800""#.utf8), false), (Array(#""\udfff""#.utf8), false),
        (Array(#""\ud800\u0041""#.utf8), false), ([0x22, 0xC0, 0x80, 0x22], false), ([0x22, 0xE0, 0x80, 0x80, 0x22], false),
        ([0x22, 0xED, 0xA0, 0x80, 0x22], false), ([0x22, 0x61, 0xFF, 0x22], false), ([0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], false),
        (Array(#""\ud83d\ude00""#.utf8), true), (Array(#""日本語""#.utf8), true), (Array(#""\u0001""#.utf8), true),
    ]
    static let hostileNumbers = ["1e999", "-1e999", "123456789012345678901234567890123456789", "1e-999", "-0", "0.0000000000000000000001"]
    static let hostileQuery = ["%00", "a%00b", "%C0%80", "%ED%A0%80", "%FF", "%E2%82", "%F4%90%80%80"]

    static func deep(_ levels: Int) -> String { String(repeating: "[", count: levels) + String(repeating: "]", count: levels) }

    @Test("Seeded fuzz over every door: hostile Unicode, huge numbers, deep nesting: never a 5xx, never a 2xx for what cannot be stored")
    func fuzzEveryDoor() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0", "API_MAX_BODY_BYTES": "262144"])
        defer { Task { await system.stop() } }
        let (receipt, decoded) = try system.forgeReceipt()
        let product = decoded.inApp[0].productID
        var generator = SeededGenerator(seed: 0x16_0422)
        let bearer = (name: "Authorization", value: "Bearer \(system.token)")
        let json = (name: "Content-Type", value: "application/json")
        let form = (name: "Content-Type", value: "application/x-www-form-urlencoded")
        var answered: [Int: Int] = [:]
        let connection = try system.postgres()
        let notificationToken = try AppAdmin(connection: connection).rotateNotificationToken(appID: system.app.id)
        connection.close()
        let notificationPath = "/apple/notifications/\(system.app.name)/\(notificationToken)"

        func check(_ status: Int, storable: Bool, _ what: @autoclosure () -> String) {
            answered[status, default: 0] += 1
            #expect(status < 500, "\(status) for \(what())")
            if !storable { #expect(status / 100 == 4, "\(status) for \(what())") }
        }

        for round in 0..<120 {
            let (hostile, storable) = Self.hostileStrings.randomElement(using: &generator)!
            let hostileText = String(decoding: hostile, as: UTF8.self)
            // POST receipts: the hostile string as a field, a metadata value, or a metadata key.
            let fields = ["user_identifier", "country_code", "identifier_for_vendor", "ip_address", "unknown_field"]
            var body: [UInt8]
            switch round % 4 {
            case 0: body = Array(#"{"receipt":"\#(receipt)","\#(fields.randomElement(using: &generator)!)":"#.utf8) + hostile + [0x7D]
            case 1: body = Array(#"{"receipt":"\#(receipt)","metadata":{"k":"#.utf8) + hostile + Array("}}".utf8)
            case 2: body = Array(#"{"receipt":"\#(receipt)","metadata":{"#.utf8) + hostile + Array(":1}}".utf8)
            default:
                let number = Self.hostileNumbers.randomElement(using: &generator)!
                let levels = [1, 31, 33, 200, 5_000].randomElement(using: &generator)!
                body = Array(#"{"receipt":"\#(receipt)","metadata":{"n":\#(number),"d":\#(Self.deep(levels))}}"#.utf8)
                let status = try await send(system, "POST", "/client/itunes_connect/receipts", headers: [json, bearer], body: body).status
                // Past 31 levels inside metadata (whose object is level 2) the document is refused.
                check(status, storable: levels <= 30 && !["1e999", "-1e999"].contains(number), "number \(number), depth \(levels)")
                continue
            }
            let status = try await send(system, "POST", "/client/itunes_connect/receipts", headers: [json, bearer], body: body).status
            // A storable string may still be refused for its field's shape (a country code): never 5xx.
            check(status, storable: storable, "receipts body \(hostileText.debugDescription)")

            // Query strings and paths of the read endpoints.
            let query = Self.hostileQuery.randomElement(using: &generator)!
            check(
                try await send(system, "GET", "/client/subscriptions?user_identifier=\(query)", headers: [bearer]).status, storable: false,
                "entitlements \(query)")
            check(
                try await send(system, "GET", "/client/subscriptions/1\(query)?environment=sandbox", headers: [bearer]).status, storable: false,
                "subscription \(query)")
            check(
                try await send(system, "GET", "/client/itunes_connect/receipts/\(query)", headers: [bearer]).status, storable: false,
                "receipt \(query)")

            // The softphone: a query, a form body and a JSON body.
            let softQuery =
                "receipt=\(receipt.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&productCode=\(product)&user=\(query)&token=\(system.token)"
            check(try await send(system, "GET", "\(SoftphoneService.path)?\(softQuery)").status, storable: false, "softphone query \(query)")
            check(
                try await send(system, "POST", SoftphoneService.path, headers: [form], body: Array(softQuery.utf8)).status, storable: false,
                "softphone form \(query)")
            let softJSON =
                Array(#"{"receipt":"\#(receipt)","productCode":"\#(product)","token":"\#(system.token)","account":"#.utf8) + hostile + [0x7D]
            check(
                try await send(system, "POST", SoftphoneService.path, headers: [json], body: softJSON).status, storable: storable,
                "softphone json \(hostileText.debugDescription)")

            // Apple's notification endpoint: the hostile string in the path, in a V2 or a V1 body.
            check(
                try await send(system, "POST", "/apple/notifications/\(query)/\(notificationToken)", headers: [json], body: Array("{}".utf8))
                    .status, storable: false, "notification path \(query)")
            let notificationBodies: [[UInt8]] = [
                Array(#"{"signedPayload":"#.utf8) + hostile + [0x7D],
                Array(#"{"notification_type":"#.utf8) + hostile + Array(#","password":"integration-secret"}"#.utf8),
                Array(#"{"notification_type":"CANCEL","password":"integration-secret","unified_receipt":{"k":"#.utf8) + hostile + Array("}}".utf8),
            ]
            // A V2 body is never Apple's here (never a 2xx); a V1 one with the app's password is,
            // when the string can be stored.
            let pick = Int.random(in: 0..<notificationBodies.count, using: &generator)
            check(
                try await send(system, "POST", notificationPath, headers: [json], body: notificationBodies[pick]).status,
                storable: pick > 0 && storable, "notification body \(pick) \(hostileText.debugDescription)")

            // The admin API and the dashboard's forms.
            let admin = (name: "Authorization", value: Self.adminBasic)
            check(
                try await send(system, "GET", "/admin/api/dead?error_code=\(query)", headers: [admin]).status, storable: false, "admin api \(query)")
            check(try await send(system, "GET", "/admin/retries?q=\(query)", headers: [admin]).status, storable: false, "admin page \(query)")
            check(
                try await send(system, "POST", "/admin/dead/retry", headers: [form], body: Array("csrf=x&id=\(query)".utf8)).status, storable: false,
                "admin form \(query)")
        }
        #expect(answered[422, default: 0] > 100 && answered.keys.contains { $0 / 100 == 2 }, "the pass saw both sides: \(answered)")
    }
}
