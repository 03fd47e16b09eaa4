import DevTools
import Foundation
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The app transaction API and `RESCIND_CONSENT` through the whole system (issue 42 items 6 and
/// 8): the device's signed `AppTransaction` posted to `/client/app-transactions`, verified with the
/// door's JWS check, stored per user; a parent's withdrawn consent sent by the mock App Store
/// becomes a `customer.consent_rescinded` event of the user who stored that app transaction.
@Suite("App transactions and withdrawn consent, end to end", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct AppTransactionTests {
    static let firstBought = Date(timeIntervalSince1970: 1_600_000_000)

    func appTransaction(
        _ system: TestSystem, id: String? = "7000000001", version: String = "1.0", bundleID: String? = nil, environment: String = "Sandbox",
        signed: Date = Date()
    ) -> JSONValue {
        var payload =
            MockServerAPIState.appTransaction(
                bundleID: bundleID ?? system.app.bundleID, appAppleID: system.app.appAppleID, environment: .sandbox, appTransactionID: id,
                originalApplicationVersion: version, originalPurchaseDate: Self.firstBought, signedDate: signed
            ).objectValue ?? [:]
        payload["receiptType"] = .string(environment)
        payload["environment"] = .string(environment)
        return .object(payload)
    }

    func post(_ system: TestSystem, _ body: [String: JSONValue]) async throws -> (Int, JSONValue?) {
        try await system.post(JSONValue.object(body).encodedText, path: "/client/app-transactions")
    }

    @Test(
        "POST /client/app-transactions stores what Apple signed for the user (an older one never replaces it); forged → 402 with the reason, bad input → 422"
    )
    func storedAndRefused() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let authority = try TestSystem.sharedJWSAuthority.get()
        let jws = try authority.sign(appTransaction(system, version: "1.0"))
        let (status, answer) = try await post(system, ["signed_app_transaction": .string(jws), "user_identifier": .string("migrating-user")])
        #expect(status == 200, "\(String(describing: answer))")
        let stored = answer?["app_transaction"]
        #expect(stored?["original_application_version"]?.stringValue == "1.0")
        #expect(stored?["original_purchase_date"]?["ms"]?.stringValue == "1600000000000")
        #expect(stored?["app_transaction_id"]?.stringValue == "7000000001")
        #expect(stored?["environment"]?.stringValue == "sandbox")
        #expect(stored?["user_identifier"]?.stringValue == "migrating-user")

        // An older one (a device replaying its cache) leaves the newer stored, and answers it.
        let older = try authority.sign(appTransaction(system, version: "0.9", signed: Date(timeIntervalSinceNow: -86_400)))
        let replay = try await post(system, ["signed_app_transaction": .string(older), "user_identifier": .string("migrating-user")])
        #expect(replay.0 == 200)
        #expect(replay.1?["app_transaction"]?["original_application_version"]?.stringValue == "1.0")
        let (listed, list) = try await system.get(path: "/client/app-transactions?user_identifier=migrating-user")
        #expect(listed == 200)
        #expect(list?["app_transactions"]?.arrayValue?.map { $0["original_application_version"]?.stringValue } == ["1.0"])
        #expect(try await system.get(path: "/client/app-transactions?user_identifier=nobody").1?["app_transactions"]?.arrayValue?.isEmpty == true)

        // Forged: another chain, another app, a local (Xcode) signature.
        func refusal(_ text: String) async throws -> (Int, String?) {
            let (code, body) = try await post(system, ["signed_app_transaction": .string(text), "user_identifier": .string("forger")])
            return (code, body?["fraud_reason"]?.stringValue)
        }
        let stranger = try MockAppleJWSAuthority.generate()
        #expect(try await refusal(try stranger.sign(appTransaction(system))) == (402, "untrusted_chain"))
        #expect(try await refusal(try authority.sign(appTransaction(system, bundleID: "com.example.other"))) == (402, "bundle_id_mismatch"))
        #expect(try await refusal(try authority.sign(appTransaction(system, environment: "Xcode"))) == (402, "environment_mismatch"))
        let parts = jws.split(separator: ".")
        #expect(try await refusal("\(parts[0]).\(parts[1]).\(parts[2].dropLast(4))AAAA").0 == 402)
        #expect(try await system.get(path: "/client/app-transactions?user_identifier=forger").1?["app_transactions"]?.arrayValue?.isEmpty == true)

        // Bad input: 422 naming the field.
        func field(_ body: [String: JSONValue]) async throws -> (Int, String?) {
            let (code, answer) = try await post(system, body)
            return (code, answer?["errors"]?.arrayValue?.first?["field"]?.stringValue)
        }
        #expect(try await field(["user_identifier": .string("u")]) == (422, "signed_app_transaction"))
        #expect(try await field(["signed_app_transaction": .string(jws)]) == (422, "user_identifier"))
        #expect(
            try await field(["signed_app_transaction": .string("not a jws"), "user_identifier": .string("u")]) == (422, "signed_app_transaction"))
        #expect(try await field(["signed_app_transaction": .number(1), "user_identifier": .string("u")]) == (422, "signed_app_transaction"))
        // Apple's, but a purchase, not an app transaction.
        let (purchase, _) = try system.signedTransaction()
        #expect(try await field(["signed_app_transaction": .string(purchase), "user_identifier": .string("u")]) == (422, "signed_app_transaction"))
        #expect(try await system.get(path: "/client/app-transactions").0 == 422)
        #expect(try await system.get(path: "/client/app-transactions?user_identifier=u", token: "rq_wrong").0 == 401)
    }

    @Test("RESCIND_CONSENT (appData, no transaction): recorded, and a customer.consent_rescinded event for the user whose app transaction it names")
    func rescindConsent() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let connection = try system.postgres()
        defer { connection.close() }
        let token = try AppAdmin(connection: connection).rotateNotificationToken(appID: system.app.id)
        system.mock.state.notifications.setTarget(
            .init(url: "http://127.0.0.1:\(system.apiPort)/apple/notifications/\(system.app.name)/\(token)", version: "v2"),
            bundleID: system.app.bundleID)
        let authority = try TestSystem.sharedJWSAuthority.get()
        let payload = appTransaction(system, id: "7000000042")
        let posted = try await post(
            system, ["signed_app_transaction": .string(try authority.sign(payload)), "user_identifier": .string("child-account")])
        #expect(posted.0 == 200)

        let uuid = try system.mock.state.notifications.rescindConsent(
            appTransaction: payload, bundleID: system.app.bundleID, environment: .sandbox)
        let path = "/client/events?type=customer.consent_rescinded&user_identifier=child-account"
        #expect(try await eventually { try await system.get(path: path).1?["events"]?.arrayValue?.count == 1 })
        let event = try await system.get(path: path).1?["events"]?.arrayValue?.first
        #expect(event?["subject"]?.stringValue == "app_transaction:7000000042")
        #expect(event?["data"]?["notification_uuid"]?.stringValue == uuid)
        #expect(event?["environment"]?.stringValue == "sandbox")
        func auditRows() throws -> [PostgresRow] {
            try connection.query(
                "SELECT notification_type, outcome, payload::text AS payload FROM notifications WHERE app_id = \(system.app.id)"
            ).rows
        }
        let rows = try auditRows()
        #expect(rows.map { $0.string("notification_type") } == ["RESCIND_CONSENT"])
        #expect(rows.first?.string("outcome") == "recorded")
        // The operators' copy shows the app transaction decoded.
        #expect(rows.first?.string("payload")?.contains("7000000042") == true)
    }
}
