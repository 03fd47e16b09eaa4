import Foundation
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The first requests after Redis restarted on the same address: answered, not a 503 for the
/// connections the old server closed (issue 41, item 5).
@Suite("Redis restarted: the first request after is answered", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct RedisRestartRequestTests {
    @Test("After Redis SHUTDOWN and a start on the same port, the first POST and the first lookup are 2xx, and the receipt is validated")
    func firstRequestAfterRestart() async throws {
        let server = try await offload { try ThrowawayRedis() }
        defer { server.destroy() }
        let system = try await TestSystem.start(environment: ["REDIS_HOSTNAME": "127.0.0.1", "REDIS_PORT": String(server.port)])
        defer { Task { await system.stop() } }
        // Every connection the API and the workers use is open before the restart.
        let (before, _) = try system.forgeReceipt()
        let (warm, _) = try await system.post(#"{"receipt":"\#(before)"}"#)
        #expect(warm == 200)

        try await offload {
            try server.shutdown()
            try server.start()
        }

        let (receipt, _) = try system.forgeReceipt()
        let (status, body) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        #expect((200..<300).contains(status), "the first POST after the restart: \(status) \(String(describing: body))")
        let id = try #require(body?["id"]?.stringValue, "\(String(describing: body))")
        let (lookup, resource) = try await system.get(id)
        #expect((200..<300).contains(lookup), "the first lookup after the restart: \(lookup) \(String(describing: resource))")
        // The workers' connections came back too: the receipt ends validated.
        let validated = try await eventually(timeout: .seconds(30)) { try await system.get(id).1?["validation_status"]?.stringValue == "valid" }
        #expect(validated, "validated after the restart")
    }
}
