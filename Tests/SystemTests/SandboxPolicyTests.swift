import DevTools
import Foundation
import Libpq
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The per-app sandbox policy, end to end: a sandbox purchase (App Review's kind) reaching a
/// production deployment is entitled (`accept`), entitled and marked (`flag`), or stored invalid
/// and never entitled (`reject`); the policy is named in the entitlement answer.
@Suite("Sandbox policy: accept, flag, reject", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct SandboxPolicyTests {
    /// A new app with `policy`, and a sandbox receipt of it (a year's subscription) validated by the
    /// worker; the settled receipt resource and the user's entitlement answer.
    func settle(_ system: TestSystem, policy: SandboxPolicy) async throws -> (receipt: JSONValue?, entitlements: JSONValue?) {
        let connection = try PostgresConnection(configuration: system.configuration.postgres)
        defer { connection.close() }
        let admin = AppAdmin(connection: connection)
        let bundleID = "com.example.policy.\(UUID().uuidString.prefix(8).lowercased())"
        let secret = "policy-secret"
        let (app, token) = try admin.addApp(name: "policy-\(UUID().uuidString.prefix(8))", bundleID: bundleID, sharedSecret: secret)
        try admin.setValidation(appID: app.id, sandboxPolicy: policy)
        system.mock.state.setSharedSecret(secret, for: bundleID)
        let receipt = Data(try ReceiptForger.unified(ReceiptForger.demoReceipt(bundleID: bundleID), authority: system.authority))
            .base64EncodedString()
        let user = "policy-user-\(policy.rawValue)"
        let body = #"{"receipt":"\#(receipt)","user_identifier":"\#(user)"}"#
        let (status, accepted) = try await system.post(body, token: token)
        #expect([200, 206].contains(status))
        let id = try #require(accepted?["id"]?.stringValue)
        var settled: JSONValue?
        _ = try await eventually {
            settled = try await system.get(id, token: token).1
            return settled?["validation_status"]?.stringValue != "pending"
        }
        return (settled, try await system.get(path: "/client/subscriptions?user_identifier=\(user)", token: token).1)
    }

    @Test("accept: entitled, not marked; flag: entitled and marked sandbox_flagged everywhere; reject: invalid, nothing entitled")
    func policies() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }

        let accepted = try await settle(system, policy: .accept)
        #expect(accepted.receipt?["validation_status"] == .string("valid"))
        #expect(accepted.receipt?["environment"] == .string("sandbox"))
        #expect(accepted.receipt?["sandbox_flagged"] == nil)
        #expect(accepted.entitlements?["sandbox_policy"] == .string("accept"))
        #expect(accepted.entitlements?["subscriptions"]?.arrayValue?.first?["is_entitled"] == .bool(true))
        #expect(accepted.entitlements?["subscriptions"]?.arrayValue?.first?["sandbox_flagged"] == nil)

        let flagged = try await settle(system, policy: .flag)
        #expect(flagged.receipt?["validation_status"] == .string("valid"))
        #expect(flagged.receipt?["sandbox_flagged"] == .bool(true))
        #expect(flagged.receipt?["in_app_purchases"]?.arrayValue?.allSatisfy { $0["sandbox_flagged"] == .bool(true) } == true)
        #expect(flagged.entitlements?["sandbox_policy"] == .string("flag"))
        let subscription = flagged.entitlements?["subscriptions"]?.arrayValue?.first
        #expect(subscription?["is_entitled"] == .bool(true))
        #expect(subscription?["sandbox_flagged"] == .bool(true))
        #expect(flagged.entitlements?["purchases"]?.arrayValue?.allSatisfy { $0["sandbox_flagged"] == .bool(true) } == true)

        let rejected = try await settle(system, policy: .reject)
        #expect(rejected.receipt?["validation_status"] == .string("invalid"))
        #expect(rejected.entitlements?["sandbox_policy"] == .string("reject"))
        #expect(rejected.entitlements?["subscriptions"]?.arrayValue?.contains { $0["is_entitled"] == .bool(true) } != true)
    }
}
