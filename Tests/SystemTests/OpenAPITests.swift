import Curl
import DevTools
import Foundation
import Hummingbird
import IngestAPI
import Logging
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// Keeps `Sources/IngestAPI/openapi.yaml` true: the server serves it, it is valid OpenAPI 3.1
/// (openapi-spec-validator), it documents exactly the routes the server registers, and what the
/// server really answers matches it (openapi-core, with undocumented fields refused).
@Suite(
    "OpenAPI: the served document describes the server", .blockingWork,
    .enabled(if: TestEnvironment.integrationEnabled && (OpenAPIChecker.python != nil || TestEnvironment.integrationRequired)),
    .serialized)
struct OpenAPITests {
    /// Operations documented for endpoints still being built. Each must be absent from the router:
    /// once one is served this test fails until it is taken off the list, so the list cannot go stale.
    static let documentedNotYetServed: Set<String> = []

    @Test("Every route the server registers is documented, and every documented operation is routed")
    func routesMatchTheDocument() throws {
        let report = try OpenAPIChecker.check(spec: OpenAPIDocument.yaml)
        let documented = Set(report.operations)
        let configuration = try AppConfiguration(environment: [
            "HTTP_PORT": "0", "RECEIPTQ_TRUST_ROOTS_DIR": try TestSystem.trustDirectory.get().path,
        ])
        let (router, intake, _) = try ReceiptQueueApp.makeRouter(configuration, logger: Logger(label: "openapi-test"))
        defer { intake.shutdown() }
        // Hummingbird prints routes as "GET /a/{id}", the shape of OpenAPI's path templates.
        // The dashboard's HTML pages (every /admin route outside /admin/api) are for browsers, not
        // API clients: the document describes the JSON admin API they share their data with.
        let routed = Set(
            router.routes.map { "\($0.method) \($0.path)" }.filter { route in
                let path = route.split(separator: " ")[1]
                return !(path == "/admin" || (path.hasPrefix("/admin/") && !path.hasPrefix("/admin/api/")))
            })

        #expect(routed.subtracting(documented).sorted() == [], "routes the document does not describe")
        #expect(
            documented.subtracting(routed).subtracting(Self.documentedNotYetServed).sorted() == [],
            "documented operations no route serves")
        #expect(
            Self.documentedNotYetServed.intersection(routed).sorted() == [],
            "served now: remove from documentedNotYetServed so the answers get checked like the others")
    }

    @Test("The events API's type filter admits exactly the event types and families receiptq accepts")
    func eventTypesMatchTheDocument() throws {
        let document = String(decoding: OpenAPIDocument.yaml, as: UTF8.self)
        let line = try #require(
            document.split(separator: "\n").first { $0.contains(#"pattern: "^(\\*|(receipt|purchase|subscription|customer|entitlement|refund)"#) })
        // The YAML double-quoted string, unescaped: `\\` is one backslash.
        let quoted = line.drop { $0 != "\"" }.dropFirst().dropLast()
        let pattern = try NSRegularExpression(pattern: quoted.replacingOccurrences(of: #"\\"#, with: #"\"#))
        func admits(_ text: String) -> Bool { pattern.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil }
        let samples =
            EventType.allCases.map(\.rawValue) + [
                "*", "subscription.*", "receipt.*,purchase.refunded", "receipt.zk_", "purchase.p",
                "subscription.nope", "subscription", "", "subscription.renewed,", "webhook.test",
            ]
        for sample in samples {
            let patterns = sample.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            #expect(admits(sample) == patterns.allSatisfy(EventType.isValidPattern), "\(sample)")
        }
    }

    @Test("GET /openapi.yaml serves the repository's document as YAML, without a token")
    func servesTheDocument() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let response = try await system.client.send(Curl.HTTPRequest(url: "http://127.0.0.1:\(system.apiPort)/openapi.yaml"))
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "application/yaml")
        let repositoryCopy = try Data(contentsOf: OpenAPIChecker.packageRoot.appendingPathComponent("Sources/IngestAPI/openapi.yaml"))
        #expect(response.body == [UInt8](repositoryCopy))
    }

    @Test(
        "What the receipts, softphone and admin overview endpoints answer (200, 202, 206, 401, 402, 404, 413, 415, 422, …) is what the document says"
    )
    func answersMatchTheDocument() async throws {
        // A retry waits at least a tenth of RETRY_BASE_MS (6 s): longer than the sync wait (5 s), so a
        // receipt Apple answers 21005 for is still pending when the API answers: a certain 206.
        let system = try await TestSystem.start(environment: ["RETRY_BASE_MS": "60000", "API_MAX_BODY_BYTES": "65536"])
        defer { Task { await system.stop() } }
        let recorder = ExchangeRecorder(system: system)
        let json = [(name: "Content-Type", value: "application/json")]
        let bearer = [(name: "Authorization", value: "Bearer \(system.token)")]
        let receipts = "/client/itunes_connect/receipts"

        try await recorder.send("GET", "/openapi.yaml")
        try await recorder.send("GET", "/health/live")
        try await recorder.send("GET", "/health/ready")

        let (receipt, _) = try system.forgeReceipt()
        let valid = try await recorder.send(
            "POST", receipts, headers: json + bearer,
            body: #"{"receipt":"\#(receipt)","user_identifier":"u-1","country_code":"de","metadata":{"campaign":"x","n":[1,{"k":null}]}}"#)
        #expect(valid.status == 200)
        let id = try #require(try? JSONDecoder().decode(JSONValue.self, from: Data(valid.body.utf8))["id"]?.stringValue)
        try await recorder.send("GET", "\(receipts)/\(id)", headers: bearer)

        try await recorder.send("POST", receipts, headers: json, body: #"{"receipt":"\#(receipt)"}"#)
        try await recorder.send("POST", receipts, headers: json + [(name: "Authorization", value: "Bearer rq_unknown")], body: "{}")
        try await recorder.send("GET", "\(receipts)/\(id)", headers: [(name: "Authorization", value: "Basic dTpw")])
        try await recorder.send("POST", receipts, headers: [(name: "Content-Type", value: "text/plain")] + bearer, body: "{}")
        try await recorder.send(
            "POST", receipts, headers: json + bearer, body: #"{"receipt":"\#(String(repeating: "A", count: 70_000))"}"#)
        try await recorder.send("POST", receipts, headers: json + bearer, body: "not json")
        try await recorder.send("POST", receipts, headers: json + bearer, body: #"{"user_identifier":"u"}"#)
        try await recorder.send(
            "POST", receipts, headers: json + bearer,
            body: #"{"receipt":"\#(receipt)","country_code":"Germany","ip_address":"999.1.1.1","identifier_for_vendor":"x","metadata":[1]}"#)
        try await recorder.send("GET", "\(receipts)/\(UUID().uuidString.lowercased())", headers: bearer)
        try await recorder.send("GET", "\(receipts)/not-a-uuid", headers: bearer)

        // The entitlement API: the user of the receipt above, one of its subscriptions, and the refusals.
        let subscriptions = "/client/subscriptions"
        let listing = try await recorder.send("GET", "\(subscriptions)?user_identifier=u-1", headers: bearer)
        let original = try #require(
            try? JSONDecoder().decode(JSONValue.self, from: Data(listing.body.utf8))["subscriptions"]?.arrayValue?.first?["original_transaction_id"]?
                .stringValue)
        #expect(try await recorder.send("GET", "\(subscriptions)/\(original)", headers: bearer).status == 200)
        try await recorder.send("GET", "\(subscriptions)/\(original)?environment=production", headers: bearer)
        try await recorder.send("GET", "\(subscriptions)/\(original)?environment=staging", headers: bearer)
        try await recorder.send("GET", "\(subscriptions)/\(original)")
        try await recorder.send("GET", subscriptions, headers: bearer)
        try await recorder.send("GET", "\(subscriptions)?user_identifier=u-1")

        // The Cloud Softphone web service, in each of its formats.
        let softphone = "/cloudsoftphone/iap"
        let token = "token=\(system.token)"
        let (phoneReceipt, phoneDecoded) = try system.forgeReceipt()
        let product = phoneDecoded.inApp[0].productID
        let escaped = phoneReceipt.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        try await recorder.send("GET", "\(softphone)?productCode=\(product)&receipt=\(escaped)")
        try await recorder.send("GET", "\(softphone)?\(token)&username=u-1&price=0.99&productCode=\(product)&receipt=\(escaped)")
        try await recorder.send(
            "POST", "\(softphone)?\(token)", headers: json, body: #"{"product":"\#(product)","receipt":"\#(phoneReceipt)","price":0.99}"#)
        try await recorder.send(
            "POST", "\(softphone)?\(token)",
            headers: [
                (name: "Content-Type", value: "application/x-www-form-urlencoded"),
                (name: "Accept", value: "application/x-www-form-urlencoded"),
            ], body: "productCode=not-bought&receipt=\(escaped)")
        try await recorder.send("POST", "\(softphone)?\(token)", headers: [(name: "Content-Type", value: "text/plain")], body: "x")
        try await recorder.send("POST", "\(softphone)?\(token)", headers: json, body: #"{"product":"p"}"#)
        try await recorder.send(
            "POST", "\(softphone)?\(token)", headers: json, body: #"{"receipt":"\#(String(repeating: "A", count: 70_000))"}"#)
        let (phoneBusy, phoneBusyDecoded) = try system.forgeReceipt(mock: "status=21005")
        let queued = try await recorder.send(
            "POST", "\(softphone)?\(token)", headers: json,
            body: #"{"productCode":"\#(phoneBusyDecoded.inApp[0].productID)","receipt":"\#(phoneBusy)"}"#)
        #expect(queued.status == 202)

        // The slow ones side by side: Apple busy (206), and a receipt of a bundle id this app did not
        // register (402: refused before Apple is asked).
        system.mock.state.addRule(MockRule(bundleID: system.app.bundleID, status: 21005, times: 1))
        var foreign = ReceiptForger.demoReceipt(bundleID: "com.example.not-registered")
        foreign.environment = .productionSandbox
        let foreignReceipt = Data(try ReceiptForger.unified(foreign, authority: system.authority)).base64EncodedString()
        let (receiptB, _) = try system.forgeReceipt()
        async let busy = recorder.send("POST", receipts, headers: json + bearer, body: #"{"receipt":"\#(receiptB)"}"#)
        async let notOurs = recorder.send("POST", receipts, headers: json + bearer, body: #"{"receipt":"\#(foreignReceipt)"}"#)
        let (busyStatus, notOursStatus) = try await (busy.status, notOurs.status)
        #expect(busyStatus == 206)
        #expect(notOursStatus == 402)

        // The admin overview, after all of the above was settled and counted: the circuit and a
        // non-empty minute of activity are checked field by field too.
        let overview = try await recorder.send("GET", "/admin/api/overview", headers: [(name: "Authorization", value: AdminAPITests.basic)])
        #expect(overview.status == 200)

        let exchanges = await recorder.exchanges
        #expect(Set(exchanges.map(\.status)).isSuperset(of: [200, 202, 206, 401, 402, 404, 413, 415, 422]))
        let served = try #require(exchanges.first { $0.path == "/openapi.yaml" })
        let report = try OpenAPIChecker.check(spec: Array(served.body.utf8), exchanges: exchanges)
        #expect(report.checked == exchanges.count)
        #expect(report.failures == [], "answers that contradict openapi.yaml")
    }
}

/// One request and the server's answer, in the form scripts/openapi/check.py reads.
struct RecordedExchange: Codable, Sendable {
    var method: String
    var path: String
    var query: String
    var status: Int
    /// Lower-case names; a repeated header keeps its last value.
    var headers: [String: String]
    var body: String
}

/// Sends requests to a ``TestSystem``'s API and keeps every exchange for the checker.
actor ExchangeRecorder {
    let system: TestSystem
    private(set) var exchanges: [RecordedExchange] = []

    init(system: TestSystem) { self.system = system }

    @discardableResult
    func send(
        _ method: String, _ target: String, headers: [(name: String, value: String)] = [], body: String = ""
    ) async throws -> RecordedExchange {
        let response = try await system.client.send(
            Curl.HTTPRequest(
                method: method, url: "http://127.0.0.1:\(system.apiPort)\(target)", headers: headers, body: Array(body.utf8)))
        let parts = target.split(separator: "?", maxSplits: 1).map(String.init)
        let exchange = RecordedExchange(
            method: method, path: parts[0], query: parts.count > 1 ? parts[1] : "", status: response.status,
            headers: Dictionary(response.headers.map { ($0.name.lowercased(), $0.value) }) { _, last in last },
            body: String(decoding: response.body, as: UTF8.self))
        exchanges.append(exchange)
        return exchange
    }
}

/// Runs scripts/openapi/check.py (openapi-spec-validator and openapi-core, pinned in
/// scripts/openapi/requirements.txt) with the interpreter of `.local/venv`, which
/// `scripts/setup-python` makes (`scripts/test` runs it).
enum OpenAPIChecker {
    /// What the checker found.
    struct Report: Decodable {
        /// Every documented operation, as "METHOD /path".
        var operations: [String]
        /// How many recorded responses were validated.
        var checked: Int
        /// One sentence per mismatch between a response and the document.
        var failures: [String]
    }

    /// The package root, seen from this file (Tests/SystemTests/OpenAPITests.swift).
    static var packageRoot: URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }

    /// The virtual environment's Python (`RECEIPTQ_PYTHON` overrides), or nil when it is not set up.
    static var python: URL? {
        if let path = ProcessInfo.processInfo.environment["RECEIPTQ_PYTHON"] { return URL(fileURLWithPath: path) }
        let venv = packageRoot.appendingPathComponent(".local/venv/bin/python")
        return FileManager.default.isExecutableFile(atPath: venv.path) ? venv : nil
    }

    /// Validates `spec`, and each of `exchanges` against it.
    /// - Throws: when the document is not valid OpenAPI 3.1, or the checker cannot run.
    static func check(spec: [UInt8], exchanges: [RecordedExchange] = []) throws -> Report {
        let python = try #require(python, "no .local/venv: run scripts/setup-python (scripts/test does)")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-openapi-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let specURL = directory.appendingPathComponent("openapi.yaml")
        try Data(spec).write(to: specURL)
        var arguments = [packageRoot.appendingPathComponent("scripts/openapi/check.py").path, specURL.path]
        if !exchanges.isEmpty {
            let exchangesURL = directory.appendingPathComponent("exchanges.json")
            try JSONEncoder().encode(exchanges).write(to: exchangesURL)
            arguments.append(exchangesURL.path)
        }

        // stderr to a file: the validator's complaints can outgrow a pipe while stdout is being read.
        let stderrURL = directory.appendingPathComponent("stderr.txt")
        let (status, output) = try ChildProcess.run([python.path] + arguments, stderr: .file(stderrURL.path))
        let errors = (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? ""
        // Exit 1 means "responses do not match": the report lists them. Anything else is fatal.
        guard [0, 1].contains(status) else {
            Issue.record("scripts/openapi/check.py exited \(status): \(errors)")
            throw CocoaError(.fileReadCorruptFile)
        }
        return try JSONDecoder().decode(Report.self, from: Data(output))
    }
}
