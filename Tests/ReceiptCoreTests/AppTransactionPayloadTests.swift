import Foundation
import ReceiptCore
import Testing

/// The 2025–2026 payloads (issue 42 items 6 and 8): the app transaction Apple signs for the device
/// and for Get App Transaction Info, and `RESCIND_CONSENT`'s `appData`.
@Suite("App transaction payloads and RESCIND_CONSENT")
struct AppTransactionPayloadTests {
    static func object(_ text: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }

    static let appTransaction = """
        {"receiptType":"Production","appAppleId":1234567890,"bundleId":"com.example","applicationVersion":"42",
         "versionExternalIdentifier":812345,"receiptCreationDate":1700000000000,"originalPurchaseDate":1600000000000,
         "originalApplicationVersion":"1.0","deviceVerification":"c2hhMzg0","deviceVerificationNonce":"b5f4c3a2-0000-4000-8000-000000000001",
         "preorderDate":1590000000000,"appTransactionId":"704289572311","originalPlatform":"iOS","signedDate":1700000001000,
         "aFieldOf2027":"kept"}
        """

    @Test("An app transaction with every documented field, and one Apple has not documented yet")
    func documented() throws {
        let payload = try JWSAppTransactionPayload(json: Self.object(Self.appTransaction))
        #expect(payload.appAppleID == 1_234_567_890)
        #expect(payload.bundleID == "com.example")
        #expect(payload.applicationVersion == "42")
        #expect(payload.originalApplicationVersion == "1.0")
        #expect(payload.originalPurchaseDate == Date(timeIntervalSince1970: 1_600_000_000))
        #expect(payload.receiptCreationDate == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(payload.preorderDate == Date(timeIntervalSince1970: 1_590_000_000))
        #expect(payload.deviceVerification == "c2hhMzg0")
        #expect(payload.deviceVerificationNonce == "b5f4c3a2-0000-4000-8000-000000000001")
        #expect(payload.appTransactionID == "704289572311")
        #expect(payload.originalPlatform == "iOS")
        #expect(payload.signedDate == Date(timeIntervalSince1970: 1_700_000_001))
        #expect(payload.environment == "Production")
        #expect(payload.json["aFieldOf2027"]?.stringValue == "kept")
        let record = AppTransactionRecord(payload, appID: UUID(), userIdentifier: "u", at: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(record.environment == "production")
        #expect(record.signedDate == Date(timeIntervalSince1970: 1_700_000_001))
        #expect(record.originalPurchaseDate == Date(timeIntervalSince1970: 1_600_000_000))
    }

    @Test("Without its bundle id, original version or purchase date, or with a field of the wrong type: malformed_payload")
    func malformed() throws {
        let full = try Self.object(Self.appTransaction).objectValue ?? [:]
        for missing in ["bundleId", "originalApplicationVersion", "originalPurchaseDate"] {
            var copy = full
            copy[missing] = nil
            #expect(throws: JWSFailure.malformedPayload) { try JWSAppTransactionPayload(json: .object(copy)) }
        }
        for (field, value) in [("appAppleId", JSONValue.string("x")), ("originalPurchaseDate", .string("2020")), ("preorderDate", .bool(true))] {
            var copy = full
            copy[field] = value
            #expect(throws: JWSFailure.malformedPayload) { try JWSAppTransactionPayload(json: .object(copy)) }
        }
    }

    @Test("RESCIND_CONSENT: a known type, its appData read (bundle, environment, nested app transaction), no state changed")
    func rescindConsent() throws {
        #expect(NotificationTypes.v2.contains("RESCIND_CONSENT"))
        #expect(NotificationTypes.all.filter { $0 == "RESCIND_CONSENT" }.count == 1)
        let json = try Self.object(
            """
            {"notificationType":"RESCIND_CONSENT","notificationUUID":"0b5c7e3a-1","version":"2.0","signedDate":1700000001000,
             "appData":{"appAppleId":1234567890,"bundleId":"com.example","environment":"Sandbox","signedAppTransactionInfo":"a.b.c"}}
            """)
        let payload = try JWSNotificationPayload(json: json)
        #expect(payload.bundleID == "com.example")
        #expect(payload.environment == "Sandbox")
        #expect(payload.appAppleID == 1_234_567_890)
        #expect(payload.signedAppTransactionInfo == "a.b.c")
        #expect(JWSExpectation(bundleIDs: ["com.other"]).failure(for: json) == .bundleIDMismatch, "appData is checked like data")
        var wrong = json.objectValue ?? [:]
        wrong["appData"] = .object(["signedAppTransactionInfo": .number(1)])
        #expect(throws: JWSFailure.malformedPayload) { try JWSNotificationPayload(json: .object(wrong)) }
        let notification = AppleNotification(
            version: .v2, uuid: "0b5c7e3a-1", type: "RESCIND_CONSENT", signedDate: Date(timeIntervalSince1970: 1_700_000_001),
            environment: "sandbox")
        #expect(!notification.effect.changesState)
        #expect(notification.effect.originalTransactionID == nil)
    }

    @Test("The consent event names the app transaction and the user, once per notification")
    func consentEvent() {
        let event = NewEvent.consentRescinded(
            notificationUUID: "n-1", appTransactionID: "704", appID: UUID(), environment: "production", userIdentifier: "child",
            occurredAt: Date(timeIntervalSince1970: 1_700_000_000), id: UUID())
        #expect(event.type == .consentRescinded)
        #expect(event.type.rawValue == "customer.consent_rescinded")
        #expect(EventType.isValidPattern("customer.*"))
        #expect(event.subject == "app_transaction:704")
        #expect(event.userIdentifier == "child")
        #expect(event.dedupeKey == "consent:n-1")
        #expect(event.data.contains("\"app_transaction_id\":\"704\""))
        let unnamed = NewEvent.consentRescinded(
            notificationUUID: "n-2", appTransactionID: nil, appID: UUID(), environment: nil, userIdentifier: nil, occurredAt: Date(),
            id: UUID())
        #expect(unnamed.subject == "notification:n-2")
    }
}
