import Foundation
import HTTPTypes
import Hummingbird
import IngestAPI
import Logging
import NIOCore
import ReceiptCore
import ReceiptTesting
import RouterTesting
import Synchronization
import Testing

/// The web service's handler through Hummingbird's router, on in-memory doubles: what needs no
/// server (Redis down, the Digest handshake, a fuzz pass over the HTTP layer).
@Suite("Softphone web service on in-memory doubles")
struct SoftphoneServiceTests {
    func application(
        intake: StubIntake, catalog: StubCatalog = StubCatalog(), fraud: String? = nil, maxBodyBytes: Int = 1 << 20
    ) -> some ApplicationProtocol {
        let api = IngestAPI(
            intake: intake, catalog: catalog, authenticity: StubAuthenticity(fraudReason: fraud), gate: .local(),
            configuration: .init(syncWait: .milliseconds(10), maxBodyBytes: maxBodyBytes))
        let router = Router(context: IngestRequestContext.self)
        api.addRoutes(to: router)
        SoftphoneService(api: api).addRoutes(to: router)
        // The doubles' failures are logged as errors on purpose; the test output needs none of them.
        var logger = Logger(label: "softphone-tests")
        logger.logLevel = .critical
        return Application(router: router, logger: logger)
    }

    static let path = SoftphoneService.path

    func basic(_ username: String = Fixtures.username, _ password: String = Fixtures.password) -> HTTPFields {
        [.authorization: "Basic " + Data("\(username):\(password)".utf8).base64EncodedString()]
    }

    /// `final` and `message` of a body in the format its Content-Type names.
    /// Empty (and an issue recorded) when the body is not in that format.
    func fields(_ response: RouterResponse) -> [String: String] {
        let body = Array(response.body.readableBytesView)
        let type = response.headers[.contentType] ?? ""
        if type.hasPrefix("application/json") {
            guard let object = try? JSONDecoder().decode([String: String].self, from: Data(body)) else {
                Issue.record("not a JSON object of strings")
                return [:]
            }
            return object
        }
        if type.hasPrefix("application/x-www-form-urlencoded") {
            guard let pairs = try? SoftphoneForm.parse(body).get() else {
                Issue.record("not form text")
                return [:]
            }
            return Dictionary(pairs.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        }
        #expect(type.hasPrefix("application/xml"))
        let text = String(decoding: body, as: UTF8.self)
        var result: [String: String] = [:]
        for name in ["final", "message", "receipt_id", "product", "transaction_id", "validation_status"] {
            if let open = text.range(of: "<\(name)>"), let close = text.range(of: "</\(name)>", range: open.upperBound..<text.endIndex) {
                result[name] = String(text[open.upperBound..<close.lowerBound])
            }
        }
        #expect(text.hasPrefix("<root>") && text.hasSuffix("</root>"))
        return result
    }

    @Test("Redis down: 503 with Retry-After and final=1, in JSON for a JSON request")
    func redisDown() async throws {
        let (base64, receipt) = try Fixtures.receipt()
        let body = #"{"receipt":"\#(base64)","product":"\#(receipt.inApp[0].productID)"}"#
        var json = basic()
        json[.contentType] = "application/json"
        let headers = json
        try await application(intake: StubIntake(.down)).withRouterClient { client in
            try await client.execute(uri: Self.path, method: .post, headers: headers, body: ByteBuffer(string: body)) { response in
                #expect(response.status.code == 503)
                #expect(response.headers[.retryAfter] == "5")
                #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
                let answer = fields(response)
                #expect(answer["final"] == "1")
                #expect(answer["message"]?.isEmpty == false)
            }
        }
    }

    @Test("Postgres down: credentials cannot be checked, so 503, never 401")
    func catalogDown() async throws {
        try await application(intake: StubIntake(.queued), catalog: StubCatalog(failing: true)).withRouterClient { client in
            for headers in [basic(), HTTPFields()] {
                try await client.execute(uri: Self.path + "?token=\(Fixtures.token)&receipt=x", method: .get, headers: headers) { response in
                    #expect(response.status.code == 503)
                    #expect(fields(response)["final"] == "1")
                }
            }
        }
    }

    @Test("Digest handshake: challenge, answer (MD5 and SHA-256), replay refused, next nc admitted, stale nonce renewed")
    func digestHandshake() async throws {
        let (base64, receipt) = try Fixtures.receipt()
        let query = "?username=johndow&product=\(receipt.inApp[0].productID)&receipt=\(base64)"
        let intake = StubIntake(.answered(.valid))
        try await application(intake: intake).withRouterClient { client in
            let challenges = try await client.execute(uri: Self.path + query, method: .get) { response in
                #expect(response.status.code == 401)
                #expect(fields(response)["final"] == "1")
                return response.headers[values: .wwwAuthenticate]
            }
            #expect(challenges.count == 3)
            #expect(challenges.last?.hasPrefix("Basic ") == true)
            let nonce = try #require(challenges.first.flatMap { $0.firstMatch(of: /nonce="([^"]+)"/)?.1 }).description
            let client1 = DigestClient(username: Fixtures.username, password: Fixtures.password)
            for (nc, algorithm) in [(1, "SHA-256"), (2, "MD5")] {
                let header = client1.header(method: "GET", uri: Self.path + query, nonce: nonce, algorithm: algorithm, nc: nc)
                try await client.execute(uri: Self.path + query, method: .get, headers: [.authorization: header]) { response in
                    #expect(response.status.code == 200, "\(algorithm)")
                    let answer = fields(response)
                    #expect(answer["final"] == "1")
                    #expect(answer["product"] == receipt.inApp[0].productID)
                    #expect(answer["transaction_id"] == receipt.inApp[0].transactionID)
                }
                // The same header again is a replay.
                try await client.execute(uri: Self.path + query, method: .get, headers: [.authorization: header]) { response in
                    #expect(response.status.code == 401)
                    #expect(response.headers[values: .wwwAuthenticate].first?.contains("stale=true") == false)
                }
            }
            // A nonce this process did not issue (another replica, a restart) with the right password: stale=true.
            let foreign = DigestNonces(secret: Array("some-other-process-secret-0123456789".utf8), lifetime: .seconds(300))
                .issue(now: Date())
            let header = client1.header(method: "GET", uri: Self.path + query, nonce: foreign, algorithm: "MD5")
            try await client.execute(uri: Self.path + query, method: .get, headers: [.authorization: header]) { response in
                #expect(response.status.code == 401)
                #expect(response.headers[values: .wwwAuthenticate].prefix(2).allSatisfy { $0.contains("stale=true") })
            }
        }
        #expect(intake.enqueued.withLock { $0.map(\.origin) } == [.softphone, .softphone])
        #expect(intake.enqueued.withLock { $0.first?.payload.userIdentifier } == "johndow")
    }

    @Test("Refusals before any receipt is queued: 415, 413, 422, and 401 before 422")
    func refusals() async throws {
        let intake = StubIntake(.answered(.valid))
        try await application(intake: intake, maxBodyBytes: 4096).withRouterClient { client in
            var headers = basic()
            headers[.contentType] = "text/plain"
            try await client.execute(uri: Self.path, method: .post, headers: headers, body: ByteBuffer(string: "x")) { response in
                #expect(response.status.code == 415)
                #expect(fields(response)["final"] == "1")
            }
            headers[.contentType] = "application/x-www-form-urlencoded"
            try await client.execute(
                uri: Self.path, method: .post, headers: headers, body: ByteBuffer(string: String(repeating: "a", count: 5000))
            ) { response in
                #expect(response.status.code == 413)
            }
            try await client.execute(uri: Self.path, method: .post, headers: headers, body: ByteBuffer(string: "productCode=x")) {
                response in
                #expect(response.status.code == 422)
                #expect(fields(response)["message"] == "The receipt parameter is required.")
            }
            headers[.contentType] = "application/json"
            try await client.execute(uri: Self.path, method: .post, headers: headers, body: ByteBuffer(string: "{")) { response in
                #expect(response.status.code == 422)
                #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
            }
            // Without credentials the same bad request is a 401: validation is for known callers.
            try await client.execute(
                uri: Self.path, method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: "{")
            ) { response in
                #expect(response.status.code == 401)
            }
            try await client.execute(uri: Self.path + "?productCode=x", method: .get, headers: basic(Fixtures.username, "wrong")) {
                response in
                #expect(response.status.code == 401)
                #expect(fields(response)["message"] == "Authentication is required.")
            }
        }
        #expect(intake.enqueued.withLock { $0.isEmpty })
    }

    @Test("Fuzz: mutated query strings and form/JSON bodies never get a 5xx, and always final=1")
    func fuzz() async throws {
        let (base64, receipt) = try Fixtures.receipt()
        let product = receipt.inApp[0].productID
        let query = "receipt=\(base64)&productCode=\(product)&price=0.99&currency=EUR&username=u+1&token=\(Fixtures.token)"
        let json = #"{"receipt":"\#(base64)","product":"\#(product)","price":0.99,"username":"u"}"#
        let basic = basic()
        let intake = StubIntake(.answered(.valid))
        let statuses = try await application(intake: intake).withRouterClient { client in
            var random = SeededGenerator(seed: 0xF022_50F7)
            var statuses: [Int: Int] = [:]
            // The first three requests are unmutated (form, JSON, GET): the success path is always
            // reached. Then at least 100 mutated ones however loaded the machine is, and more until
            // 3 seconds or 1,500.
            let deadline = ContinuousClock.now + .seconds(3)
            var iteration = 0
            while Self.keepFuzzing(iteration, minimum: 103, maximum: 1500, deadline: deadline) {
                iteration += 1
                let request = Self.fuzzRequest(iteration, query: query, json: json, basic: basic, &random)
                let response = try await client.execute(
                    uri: request.uri, method: request.method, headers: request.headers, body: request.body)
                statuses[Int(response.status.code), default: 0] += 1
                #expect(response.status.code < 500, "iteration \(iteration)")
                #expect(fields(response)["final"] == "1", "iteration \(iteration)")
            }
            return statuses
        }
        // The pass reached both the refusals and the success path.
        #expect(statuses[200, default: 0] > 0)
        #expect(statuses.keys.contains { $0 >= 400 })
    }

    /// Whether a fuzz pass goes on: always below `minimum` (coverage however loaded the machine
    /// is), then until `deadline` or `maximum`.
    static func keepFuzzing(_ done: Int, minimum: Int, maximum: Int, deadline: ContinuousClock.Instant) -> Bool {
        if done < minimum { return true }
        return done < maximum && ContinuousClock.now < deadline
    }

    /// The `iteration`th request of the fuzz pass: a GET with Basic credentials, a form POST with the
    /// token in its body, or a JSON POST with the token in the query string, in turn.
    static func fuzzRequest(
        _ iteration: Int, query: String, json: String, basic: HTTPFields, _ random: inout SeededGenerator
    ) -> (uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?) {
        let accepts = [nil, "application/json", "application/x-www-form-urlencoded", "text/xml;q=0.5, */*;q=0.1", "garbage;;q=x"]
        let edits = iteration <= 3 ? 0 : Int.random(in: 0...5, using: &random)
        var headers = iteration.isMultiple(of: 3) ? basic : HTTPFields()
        if let accept = accepts.randomElement(using: &random)! { headers[.accept] = accept }
        switch iteration % 3 {
        case 0:
            // Query bytes go on the request line: keep them printable ASCII, as HTTP requires.
            let bytes = mutate(query, edits: edits, &random).map { $0 < 0x21 || $0 > 0x7E ? UInt8(ascii: "+") : $0 }
                .filter { $0 != UInt8(ascii: "#") }
            return (path + "?" + String(decoding: bytes, as: UTF8.self), .get, headers, nil)
        case 1:
            headers[.contentType] = "application/x-www-form-urlencoded"
            return (path, .post, headers, ByteBuffer(bytes: mutate(query, edits: edits, &random)))
        default:
            headers[.contentType] = "application/json"
            return (path + "?token=\(Fixtures.token)", .post, headers, ByteBuffer(bytes: mutate(json, edits: edits, &random)))
        }
    }

    static let alphabet = Array("=&%+ /?#\"{}[]:,\\\naZ09".utf8) + [0xC3, 0xFF]

    /// `edits` random edits: a byte replaced, a byte inserted, a run cut out.
    static func mutate(_ text: String, edits: Int, _ random: inout SeededGenerator) -> [UInt8] {
        var bytes = Array(text.utf8)
        for _ in 0..<edits where !bytes.isEmpty {
            let position = Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<3, using: &random) {
            case 0: bytes[position] = alphabet.randomElement(using: &random)!
            case 1: bytes.insert(alphabet.randomElement(using: &random)!, at: position)
            default: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...40, using: &random)))
            }
        }
        return bytes
    }
}
