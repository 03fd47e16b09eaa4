import Curl
import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The client API's contract at its edges: tokens, the client address, size caps, and a seeded
/// property pass over the JSON body (whatever a client sends, the answer is a clear 4xx or a 2xx,
/// never a 5xx).
@Suite("Client API: tokens, addresses, caps, and random bodies", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct ClientAPITests {
    func send(_ system: TestSystem, body: String, headers: [(name: String, value: String)]) async throws -> (Int, JSONValue?, [UInt8]) {
        let response = try await system.client.send(
            Curl.HTTPRequest(method: "POST", url: system.receiptsURL, headers: headers, body: Array(body.utf8)))
        return (response.status, try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)), response.body)
    }

    @Test("Every way of not being authenticated gets the same 401; every live token of the app works; a revoked one does not")
    func tokens() async throws {
        // Many refusals from one address: the throttle (DoorThrottleTests) is set out of the way.
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0", "AUTH_THROTTLE_FREE_FAILURES": "1000"])
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let body = #"{"receipt":"\#(receipt)"}"#
        let json = (name: "Content-Type", value: "application/json")
        var bodies: Set<[UInt8]> = []
        for authorization in [
            nil, "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Token \(system.token)", "Bearer rq_unknown", "Bearer \(system.token)x",
        ] {
            let headers = [json] + (authorization.map { [(name: "Authorization", value: $0)] } ?? [])
            let (status, _, raw) = try await send(system, body: body, headers: headers)
            #expect(status == 401, "\(authorization ?? "no header")")
            bodies.insert(raw)
        }
        #expect(bodies.count == 1, "a 401 says nothing about why")

        let pg = try system.postgres()
        defer { pg.close() }
        let admin = AppAdmin(connection: pg)
        let second = try admin.rotateToken(appID: system.app.id, revokingOthers: false)
        // A fresh receipt each time: the same one again would be a duplicate (200 once validated).
        func fresh() throws -> String { #"{"receipt":"\#(try system.forgeReceipt().0)"}"# }
        #expect(try await system.post(fresh(), token: second).0 == 206)
        #expect(try await system.post(fresh(), token: system.token).0 == 206, "the first token still works")
        let lowercase = [json, (name: "Authorization", value: "bearer \(second)")]
        #expect(try await send(system, body: fresh(), headers: lowercase).0 == 206, "the scheme is case-insensitive")
        // Revoked before it was ever used (so no cached lookup can keep it alive).
        let third = try admin.rotateToken(appID: system.app.id, revokingOthers: false)
        _ = try await pg.query("UPDATE api_tokens SET revoked_at = now() WHERE prefix = \(String(third.prefix(7)))")
        #expect(try await system.post(body, token: third).0 == 401)
        let stored = try await pg.query("SELECT token_sha256 FROM api_tokens WHERE app_id = \(system.app.id)").rows
        #expect(stored.count == 3)
        #expect(stored.allSatisfy { $0.bytes("token_sha256")?.count == 32 }, "only the SHA-256 of a token is stored")
    }

    @Test("ip_address: omitted → the peer (or the trusted proxy's header); given → kept; null → not stored")
    func clientAddress() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0", "API_TRUSTED_PROXY_HEADER": "X-Forwarded-For"])
        defer { Task { await system.stop() } }
        let auth = [(name: "Content-Type", value: "application/json"), (name: "Authorization", value: "Bearer \(system.token)")]
        func address(_ fields: String, headers extra: [(name: String, value: String)] = []) async throws -> JSONValue? {
            let (receipt, _) = try system.forgeReceipt()
            let (status, resource, _) = try await send(system, body: #"{"receipt":"\#(receipt)"\#(fields)}"#, headers: auth + extra)
            #expect(status == 206)
            return resource?["ip_address"]
        }
        #expect(try await address("") == .string("127.0.0.1"))
        #expect(try await address("", headers: [(name: "X-Forwarded-For", value: "203.0.113.7, 10.0.0.1")]) == .string("203.0.113.7"))
        #expect(try await address("", headers: [(name: "X-Forwarded-For", value: "not-an-address")]) == .string("127.0.0.1"))
        #expect(try await address(#","ip_address":"2001:db8::1""#) == .string("2001:db8::1"))
        let none = try await address(#","ip_address":null"#)
        #expect(none == nil || none == .null)
    }

    @Test("metadata larger than the cap: 422 naming metadata; a body over API_MAX_BODY_BYTES: 413")
    func caps() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0", "API_MAX_BODY_BYTES": "65536"])
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let big = String(repeating: "x", count: 17 * 1024)
        let (status, errors) = try await system.post(#"{"receipt":"\#(receipt)","metadata":{"note":"\#(big)"}}"#)
        #expect(status == 422)
        #expect(errors?["errors"]?.arrayValue?.first?["field"]?.stringValue == "metadata")
        let huge = String(repeating: "y", count: 70_000)
        #expect(try await system.post(#"{"receipt":"\#(receipt)","metadata":{"note":"\#(huge)"}}"#).0 == 413)
    }

    @Test("Random bodies (seeded): never a 5xx; a 422 names a field and a reason; a 2xx carries an id")
    func randomBodies() async throws {
        let system = try await TestSystem.start(environment: ["API_SYNC_WAIT_MS": "0", "API_MAX_BODY_BYTES": "65536"])
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        var generator = SeededGenerator(seed: 0x5EED_1234)
        let fields = ["receipt", "country_code", "identifier_for_vendor", "user_identifier", "ip_address", "metadata", "other"]
        var seen: [Int: Int] = [:]
        for round in 0..<300 {
            var object: [String: String] = [:]  // field → raw JSON value
            for field in fields where Bool.random(using: &generator) {
                object[field] = Self.randomValue(for: field, receipt: receipt, using: &generator)
            }
            var body = "{" + object.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",") + "}"
            if round % 10 == 9 {
                // Byte-level damage: cut, or splice garbage into the middle.
                var bytes = Array(body.utf8)
                let at = Int.random(in: 0..<max(1, bytes.count), using: &generator)
                if Bool.random(using: &generator) {
                    bytes = Array(bytes.prefix(at))
                } else {
                    bytes.insert(contentsOf: [0xFF, 0x00, UInt8(ascii: "\""), UInt8(ascii: "{")], at: at)
                }
                body = String(decoding: bytes, as: UTF8.self)
            }
            let (status, answer) = try await system.post(body)
            seen[status, default: 0] += 1
            #expect(status < 500, "round \(round): \(status) for \(body.prefix(200))")
            #expect([200, 206, 402, 413, 422].contains(status), "round \(round): \(status)")
            if status == 422 {
                let first = answer?["errors"]?.arrayValue?.first
                #expect(first?["field"]?.stringValue?.isEmpty == false && first?["reason"]?.stringValue?.isEmpty == false)
            }
            if status / 100 == 2 { #expect(answer?["id"]?.stringValue != nil) }
        }
        #expect(seen[422, default: 0] > 0 && seen[206, default: 0] > 0, "the pass exercised both sides: \(seen)")
    }

    static func randomValue(for field: String, receipt: String, using generator: inout SeededGenerator) -> String {
        let junk = [
            "null", "true", "0", "-1.5e300", "[]", "{}", #""""#, #"" ""#, #""\u0000""#, #""<script>alert(1)</script>""#,
            #""日本語""#, "\"" + String(repeating: "z", count: 300) + "\"", #"{"a":{"b":[1,2,{"c":null}]}}"#,
        ]
        if Int.random(in: 0..<3, using: &generator) == 0 { return junk.randomElement(using: &generator)! }
        switch field {
        case "receipt":
            var text = receipt
            if Bool.random(using: &generator) { text = text.replacingOccurrences(of: "+", with: " ") }
            if Int.random(in: 0..<4, using: &generator) == 0 { text = String(text.dropLast(Int.random(in: 1...40, using: &generator))) }
            return "\"\(text)\""
        case "country_code": return ["\"US\"", "\"de\"", "\"USA\"", "\"1x\""].randomElement(using: &generator)!
        case "identifier_for_vendor": return ["\"\(UUID().uuidString)\"", "\"not-a-uuid\""].randomElement(using: &generator)!
        case "ip_address": return ["\"10.1.2.3\"", "\"::1\"", "\"300.1.1.1\"", "\"fe80::1%eth0\""].randomElement(using: &generator)!
        case "metadata": return [#"{"campaign":"x","n":1}"#, "[1,2]", "\"text\""].randomElement(using: &generator)!
        default: return "\"value\""
        }
    }
}
