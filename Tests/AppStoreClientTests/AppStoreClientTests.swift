import AppStoreClient
import Curl
import DevTools
import Foundation
import MockAppStore
import ReceiptCore
import ReceiptTesting
import SystemTesting
import Testing

/// The verifyReceipt client against the in-process mock App Store: Apple's rules over real HTTP.
// Serialized: each test blocks a Dispatch thread on curl while the mock answers on the same
// two cores; run side by side, their timeouts would measure the scheduler, not the client.
@Suite("AppStoreClient against the mock App Store", .blockingWork, .serialized)
struct AppStoreClientTests {
    static let authority = Result { try TestCertificateAuthority.generate() }

    func receipt(_ environment: ReceiptEnvironment, mock directives: String? = nil) throws -> String {
        var receipt = ReceiptForger.demoReceipt(bundleID: "com.example.client")
        receipt.environment = environment
        if let directives { receipt.opaqueValue = Array("mock:\(directives)".utf8) }
        return Data(try ReceiptForger.unified(receipt, authority: Self.authority.get())).base64EncodedString()
    }

    func withMock(
        timeout: Duration = .seconds(20), _ body: (AppStoreClient, RunningMockAppStore) async throws -> Void
    ) async throws {
        let mock = try await MockAppStore.start(state: MockAppStoreState())
        // The client (and its kept-alive connection) is gone before the mock stops, so the mock's
        // graceful shutdown has no idle connection to wait for.
        func exercise() async throws {
            let client = AppStoreClient(
                configuration: .init(productionURL: mock.productionURL, sandboxURL: mock.sandboxURL, requestTimeout: timeout))
            try await withServices([client]) { try await body(client, mock) }
        }
        let outcome: Result<Void, any Error>
        do {
            try await exercise()
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        await mock.stop()
        try outcome.get()
    }

    /// One verification through the client's asynchronous engine; the calling task never blocks a thread.
    func verify(_ client: AppStoreClient, _ request: ValidationRequest) async -> ValidationOutcome {
        await client.verify(request)
    }

    func request(_ receipt: String, secret: String? = nil) -> ValidationRequest {
        .verifyReceipt(receiptData: receipt, sharedSecret: secret, excludeOldTransactions: false)
    }

    @Test("A production receipt is valid at production in one call")
    func production() async throws {
        try await withMock { client, _ in
            let report = await verify(client, request(try receipt(.production)))
            #expect(report.verdict == .valid)
            #expect(report.calls.map(\.endpoint) == [.production])
            #expect(report.environment == "production" && report.appleStatus == 0)
            #expect(report.purchases.count == 2)
        }
    }

    @Test("A sandbox receipt: production answers 21007, the sandbox validates")
    func sandboxFlip() async throws {
        try await withMock { client, mock in
            let report = await verify(client, request(try receipt(.productionSandbox)))
            #expect(report.verdict == .valid)
            #expect(report.calls.map(\.endpoint) == [.production, .sandbox])
            #expect(report.calls.map(\.appleStatus) == [21007, 0])
            #expect(mock.state.requestCount(.sandbox) == 1)
        }
    }

    @Test("A sandbox that keeps answering 21007 is not followed in a loop")
    func flipLoopIsCapped() async throws {
        try await withMock { client, mock in
            mock.state.addRule(MockRule(status: 21007))
            let report = await verify(client, request(try receipt(.productionSandbox)))
            #expect(report.verdict == .transient)
            #expect(report.calls.count == 2)
            #expect(report.failure == .apple(21007))
        }
    }

    @Test("Outages: HTTP 503, an HTML page with 200, and garbage are outages with bounded codes")
    func outages() async throws {
        try await withMock { client, _ in
            for (directives, code) in [("http_status=503", FailureCode.http(503)), ("body=html", .nonJSONBody), ("body=garbage", .nonJSONBody)] {
                let report = await verify(client, request(try receipt(.production, mock: directives)))
                #expect(report.verdict == .outage, "\(directives)")
                #expect(report.calls.last?.errorCode == code, "\(directives)")
                #expect(report.calls.last?.appleStatus == nil)
            }
        }
    }

    @Test("A slow Apple times out into an outage after the request timeout")
    func slowAppleTimesOut() async throws {
        try await withMock(timeout: .seconds(1)) { client, _ in
            let report = await verify(client, request(try receipt(.production, mock: "delay_ms=5000")))
            #expect(report.verdict == .outage)
            #expect(report.calls.last?.errorCode == .transport(.timeout))
            // Well before the 5 s answer: the client gave up at its own timeout. (The call's own
            // latency, timed on the engine's thread: the test's task can resume seconds late in
            // the crowded start of the full run, and did, at 5.5 s.)
            let latency = try #require(report.calls.last?.latencyMs)
            #expect(latency < 4500, "\(latency) ms")
        }
    }

    @Test(
        "Apple's status codes from the mock reach the classifier",
        arguments: [(21005, AppleVerdict.transient), (21003, .invalid), (21004, .configurationError)])
    func statuses(status: Int, verdict: AppleVerdict) async throws {
        try await withMock { client, _ in
            let report = await verify(client, request(try receipt(.production, mock: "status=\(status)")))
            #expect(report.verdict == verdict)
            #expect(report.appleStatus == status)
        }
    }

    @Test("The shared secret is sent as password; a wrong one is 21004, and it never appears in the report")
    func sharedSecret() async throws {
        try await withMock { client, mock in
            mock.state.setSharedSecret("right-secret", for: "com.example.client")
            let bad = await verify(client, request(try receipt(.production), secret: "wrong-secret-value"))
            #expect(bad.verdict == .configurationError)
            #expect(!"\(bad)".contains("wrong-secret-value"))
            let good = await verify(client, request(try receipt(.production), secret: "right-secret"))
            #expect(good.verdict == .valid)
        }
    }

    @Test("Connection refused is an outage, not an invalid receipt")
    func refused() async throws {
        let client = AppStoreClient(
            configuration: .init(productionURL: "http://127.0.0.1:1/verifyReceipt", sandboxURL: "http://127.0.0.1:1/sandbox"))
        let report = try await withServices([client]) { await verify(client, request("MIIx")) }
        #expect(report.verdict == .outage)
        #expect(report.calls.first?.errorCode == .transport(.couldNotConnect))
    }

    @Test("Per-request headers script the mock too")
    func headerDirectives() async throws {
        try await withMock { _, mock in
            let http = try HTTPClient(options: CurlOptions(), lanes: 1)
            let body = Array(#"{"receipt-data":"\#(try receipt(.production))"}"#.utf8)
            let response = try await http.send(
                Curl.HTTPRequest(
                    method: "POST", url: mock.productionURL,
                    headers: [(name: "X-Mock-Status", value: "21100"), (name: "Content-Type", value: "application/json")], body: body))
            #expect(VerifyReceiptResponse(body: response.body)?.status == 21100)
            let undecodable = try await http.send(
                Curl.HTTPRequest(method: "POST", url: mock.productionURL, headers: [], body: Array(#"{"receipt-data":"AAAA"}"#.utf8)))
            #expect(VerifyReceiptResponse(body: undecodable.body)?.status == 21002)
        }
    }
}
