import Foundation
import ReceiptCore
import Testing

@testable import AppStoreClient

@Suite("Server API answers classified")
struct ServerAPIOutcomeTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func classify(_ status: Int?, _ body: String = "", retryAfter: String? = nil) -> ServerAPIOutcome {
        ServerAPIOutcome.classify(status: status, body: Array(body.utf8), retryAfter: retryAfter, now: now).outcome
    }

    @Test("Apple's error codes: retryable ones retried, unknown transactions invalid, 4040010 switches, 401 and 429 apart")
    func codes() {
        #expect(classify(200, #"{"signedTransactions":[]}"#) == .answered(.object(["signedTransactions": .array([])])))
        #expect(classify(200, "<html>down</html>") == .failed(.outage, code: .nonJSONBody))
        #expect(classify(nil) == .failed(.outage, code: .transport(.other)))
        #expect(classify(404, #"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#) == .notInThisEnvironment)
        for code in [4_040_002, 4_040_004, 4_040_006, 5_000_001] {
            #expect(classify(code == 5_000_001 ? 500 : 404, #"{"errorCode":\#(code)}"#) == .failed(.transient, code: .apple(code)))
        }
        #expect(classify(404, #"{"errorCode":4040005}"#) == .failed(.invalid, code: .apple(4_040_005)))
        #expect(classify(400, #"{"errorCode":4000006}"#) == .failed(.invalid, code: .apple(4_000_006)))
        #expect(classify(500, #"{"errorCode":5000000}"#) == .failed(.outage, code: .apple(5_000_000)))
        #expect(classify(401) == .unauthorized)
        #expect(classify(503, "Service Unavailable") == .failed(.outage, code: .http(503)))
        #expect(classify(403, "") == .failed(.configurationError, code: .http(403)))
    }

    @Test("Apple's error code comes with the outcome, from the one read of the body (the audit record's)")
    func appleCode() {
        func code(_ status: Int?, _ body: String) -> Int? {
            ServerAPIOutcome.classify(status: status, body: Array(body.utf8), retryAfter: nil, now: now).appleCode
        }
        #expect(code(404, #"{"errorCode":4040005,"errorMessage":"Original transaction id not found."}"#) == 4_040_005)
        #expect(code(429, #"{"errorCode":4290000}"#) == 4_290_000)
        #expect(code(200, #"{"signedTransactions":[]}"#) == nil)
        #expect(code(503, "Service Unavailable") == nil)
        #expect(code(nil, #"{"errorCode":4040005}"#) == nil)
    }

    @Test("Retry-After is a UNIX time in milliseconds; seconds and deltas are read too, and garbage waits a second")
    func retryAfter() {
        let at = now.addingTimeInterval(120)
        let millis = String(Int64(at.timeIntervalSince1970 * 1000))
        #expect(classify(429, #"{"errorCode":4290000}"#, retryAfter: millis) == .rateLimited(until: at))
        #expect(ServerAPIOutcome.retryAt(String(Int64(at.timeIntervalSince1970)), now: now) == at)
        #expect(ServerAPIOutcome.retryAt("30", now: now) == now.addingTimeInterval(30))
        #expect(ServerAPIOutcome.retryAt("soon", now: now) == now.addingTimeInterval(1))
        #expect(ServerAPIOutcome.retryAt(nil, now: now) == now.addingTimeInterval(1))
        #expect(ServerAPIOutcome.retryAt("-5", now: now) == now.addingTimeInterval(1))
    }
}
