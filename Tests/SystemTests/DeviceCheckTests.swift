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

/// The device check at the front door: a unified receipt's SHA-1 device hash must cover the
/// `identifier_for_vendor` sent with it (Apple's receipt validation guide), else 402
/// `device_mismatch`; apps can turn it off.
@Suite(
    "Device check: identifier_for_vendor against the receipt's device hash", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled),
    .serialized)
struct DeviceCheckTests {
    /// A receipt issued to `vendor`: its hash is SHA-1(vendor's 16 bytes ‖ opaque ‖ bundle id DER).
    static func receipt(bundleID: String, issuedTo vendor: UUID, authority: TestCertificateAuthority) throws -> String {
        var receipt = ReceiptForger.demoReceipt(bundleID: bundleID)
        receipt.sha1Hash = Array(repeating: 0, count: 20)
        receipt.sha1Hash = Digest.sha1(try #require(DeviceHash.input(identifierForVendor: vendor, receipt: receipt)))
        return Data(try ReceiptForger.unified(receipt, authority: authority)).base64EncodedString()
    }

    func body(_ receipt: String, vendor: UUID?) -> String {
        var fields: [String: JSONValue] = ["receipt": .string(receipt)]
        if let vendor { fields["identifier_for_vendor"] = .string(vendor.uuidString) }
        return String(decoding: try! JSONEncoder().encode(JSONValue.object(fields)), as: UTF8.self)
    }

    @Test("The device's own id passes (in upper or lower case); another device's is 402 device_mismatch, stored as fraud, never sent to Apple")
    func mismatch() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let device = UUID()
        let receipt = try Self.receipt(bundleID: system.app.bundleID, issuedTo: device, authority: system.authority)
        let callsBefore = system.mock.state.requestCount(.production) + system.mock.state.requestCount(.sandbox)

        let (own, ownResource) = try await system.post(body(receipt, vendor: device))
        #expect([200, 206].contains(own), "the issuing device: \(own)")
        #expect(ownResource?["is_fraud"] == .bool(false))
        let lower = String(
            decoding: try JSONEncoder().encode(
                JSONValue.object(["receipt": .string(receipt), "identifier_for_vendor": .string(device.uuidString.lowercased())])), as: UTF8.self)
        #expect([200, 206].contains(try await system.post(lower).0))

        let (other, otherResource) = try await system.post(body(receipt, vendor: UUID()))
        #expect(other == 402)
        #expect(otherResource?["fraud_reason"] == .string("device_mismatch"))
        #expect(otherResource?["is_fraud"] == .bool(true))
        #expect(otherResource?["id"] != ownResource?["id"], "a replay from another device is its own record, not the device's")
        // Without an id there is nothing to compare: accepted, as Apple's guide leaves it to the app.
        #expect([200, 206].contains(try await system.post(body(receipt, vendor: nil)).0))

        let fraudID = try #require(otherResource?["id"]?.stringValue)
        let stored = try await eventually { try await system.get(fraudID).1?["validation_status"]?.stringValue == "fraud" }
        #expect(stored, "the mismatch is stored as fraud")
        // Only the accepted submissions reached the mock (one receipt: at most the first job's calls).
        #expect(system.mock.state.requestCount(.production) + system.mock.state.requestCount(.sandbox) - callsBefore <= 2)
    }

    @Test("An app with the device check off accepts another device's id")
    func switchedOff() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let connection = try PostgresConnection(configuration: system.configuration.postgres)
        defer { connection.close() }
        let admin = AppAdmin(connection: connection)
        let bundleID = "com.example.nodevice.\(UUID().uuidString.prefix(8).lowercased())"
        let (app, token) = try admin.addApp(name: "nodevice-\(UUID().uuidString.prefix(8))", bundleID: bundleID, sharedSecret: "s")
        try admin.setValidation(appID: app.id, checksDevice: false)
        #expect(try admin.app(named: app.name)?.checksDevice == false)
        let receipt = try Self.receipt(bundleID: bundleID, issuedTo: UUID(), authority: system.authority)
        let (status, resource) = try await system.post(body(receipt, vendor: UUID()), token: token)
        #expect([200, 206].contains(status), "device check off: \(status)")
        #expect(resource?["is_fraud"] == .bool(false))
    }
}
