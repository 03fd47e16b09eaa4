import DevTools
import Foundation
import IngestAPI
import OpenSSL
import ReceiptCore
import Synchronization

/// Forged receipts shared by the suites (one test CA per process: RSA key generation is slow).
enum Fixtures {
    static let authority = Result { try TestCertificateAuthority.generate() }
    static let bundleID = "com.example.softphone"
    static let app = AppRecord(id: UUID(), name: "softphone-unit", bundleID: bundleID, sharedSecret: nil)
    static let token = "rq_unit_test_token_0123456789"
    static let username = "alice"
    static let password = "correct horse battery staple"

    /// The credentials of ``username``, computed here from the password.
    static let credentials = SoftphoneCredentials(
        app: app, username: username,
        ha1MD5: Digest.md5(Array("\(username):\(SoftphoneCredentials.realm):\(password)".utf8)),
        ha1SHA256: Digest.sha256(Array("\(username):\(SoftphoneCredentials.realm):\(password)".utf8)))

    /// A forged unified receipt of ``bundleID`` whose base64 contains a `+` (the character query
    /// strings mangle), with its decoded form.
    static func receipt() throws -> (base64: String, receipt: AppReceipt) {
        while true {
            let receipt = ReceiptForger.demoReceipt(bundleID: bundleID)
            let base64 = Data(try ReceiptForger.unified(receipt, authority: try authority.get())).base64EncodedString()
            if base64.contains("+") { return (base64, receipt) }
        }
    }
}

/// Redis stand-in: answers as told, or fails like an unreachable Redis.
final class StubIntake: ReceiptIntake {
    enum Mode: Sendable {
        /// The worker answered within the wait with this status (purchases from the receipt when valid).
        case answered(ValidationStatus)
        case queued
        case down
    }

    let mode: Mutex<Mode>
    let enqueued = Mutex<[JobEnvelope]>([])

    init(_ mode: Mode) { self.mode = Mutex(mode) }

    func enqueue(
        _ envelope: JobEnvelope, pending: ReceiptResource?, idempotencyKey: String, wait: Duration
    ) async throws
        -> IntakeResult
    {
        struct Down: Error {}
        switch mode.withLock({ $0 }) {
        case .down: throw Down()
        case .queued:
            enqueued.withLock { $0.append(envelope) }
            return .queued
        case .answered(let status):
            enqueued.withLock { $0.append(envelope) }
            guard var resource = pending, !resource.isFraud else { return .queued }
            resource.validationStatus = status
            resource.appleStatus = status == .valid ? 0 : 21003
            if status != .valid { resource.inAppPurchases = [] }
            return .answered(resource)
        }
    }

    func pendingResource(id: UUID) async throws -> ReceiptResource? { nil }

    func ping() async -> Bool {
        if case .down = mode.withLock({ $0 }) { return false }
        return true
    }

    /// Imports' progress is Redis's business; these tests read the enqueued jobs instead.
    func recordImport(_ id: UUID, appID: UUID, tally: ImportBatchTally, at: Date) async {}
}

/// Postgres stand-in: one app with one token and one softphone username.
struct StubCatalog: ReceiptCatalog {
    var failing = false

    func authenticate(token: String) async throws -> AppRecord? {
        struct Down: Error {}
        if failing { throw Down() }
        return token == Fixtures.token ? Fixtures.app : nil
    }

    func receipt(id: UUID, appID: UUID) async throws -> ReceiptResource? { nil }

    func softphoneCredentials(username: String) async throws -> SoftphoneCredentials? {
        struct Down: Error {}
        if failing { throw Down() }
        return username == Fixtures.username ? Fixtures.credentials : nil
    }

    /// No app of these tests has a notification URL.
    func notificationApp(name: String, token: String) async throws -> AppRecord? { nil }

    func ping() async -> Bool { !failing }
}

/// The signature check, answered as told.
struct StubAuthenticity: ReceiptAuthenticity {
    var fraudReason: String?
    func fraudReason(bytes: [UInt8], receipt: AppReceipt) -> String? { fraudReason }
}
