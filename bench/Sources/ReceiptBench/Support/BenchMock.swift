import Curl
import Foundation
import ReceiptTesting

/// `receiptq mock-appstore` as the rows run it: its own process on a free loopback port, told the
/// bench's shared secret for the bench's bundle (it answers 21004 otherwise, as Apple does).
struct BenchMock {
    let process: ChildProcess
    /// `http://127.0.0.1:<port>`.
    let base: String

    /// Starts the mock and waits for it; a mock that never listens or refuses the secret is
    /// stopped before the error is thrown, so no process outlives the row.
    init(receiptq: URL, latencyMs: Int, extraArguments: [String] = [], bundleID: String, sharedSecret: String, logDirectory: URL) throws {
        let port = try freeLoopbackPort()
        var environment = ProcessInfo.processInfo.environment
        environment["LOG_LEVEL"] = "warning"
        let process = try ChildProcess(
            executable: receiptq,
            arguments: ["mock-appstore", "--host", "127.0.0.1", "--port", String(port), "--latency-ms", String(latencyMs)] + extraArguments,
            environment: environment, label: "mock-appstore", logDirectory: logDirectory)
        let base = "http://127.0.0.1:\(port)"
        do {
            guard Network.waitForListener(port: port, timeout: 30) else {
                throw BenchFailure(description: "the mock App Store did not listen on \(port):\n\(process.logTail())")
            }
            let body = try JSONEncoder().encode(["bundle_id": bundleID, "shared_secret": sharedSecret])
            let response = try CurlEasy(options: CurlOptions()).perform(
                HTTPRequest(
                    method: "POST", url: "\(base)/mock/secrets", headers: [(name: "Content-Type", value: "application/json")], body: [UInt8](body)))
            guard response.status == 204 else { throw BenchFailure(description: "mock /mock/secrets answered \(response.status)") }
        } catch {
            _ = process.stop(grace: 2)
            throw error
        }
        self.process = process
        self.base = base
    }
}
