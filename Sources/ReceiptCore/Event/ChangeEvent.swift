import Foundation

/// One change receiptq recorded, as the events API lists it and a webhook delivers it: written in
/// the same transaction as the change itself (an outbox), so it exists if and only if the change
/// committed.
public struct ChangeEvent: Sendable, Equatable {
    /// UUIDv7.
    public var id: UUID
    public var type: EventType
    public var appID: UUID
    /// `production` or `sandbox` (nil for a receipt Apple never saw, such as a forgery).
    public var environment: String?
    public var userIdentifier: String?
    /// What the event is about, and what its `sequence` counts: `subscription:<original
    /// transaction id>`, `purchase:<transaction id>` or `receipt:<id>`.
    public var subject: String
    public var originalTransactionID: String?
    public var transactionID: String?
    public var receiptID: UUID?
    /// 1, 2, 3, … per subject (and environment): a backend that sees 5 after 3 knows it missed one.
    public var sequence: Int64
    /// When Apple says the change happened (the renewal's purchase date, the refund's date, …).
    public var occurredAt: Date
    /// When receiptq committed it.
    public var recordedAt: Date
    /// The resource after the change and what changed, as JSON text (the `data` member).
    public var data: String

    /// Creates an event.
    public init(
        id: UUID, type: EventType, appID: UUID, environment: String?, userIdentifier: String?, subject: String,
        originalTransactionID: String?, transactionID: String?, receiptID: UUID?, sequence: Int64, occurredAt: Date,
        recordedAt: Date, data: String
    ) {
        self.id = id
        self.type = type
        self.appID = appID
        self.environment = environment
        self.userIdentifier = userIdentifier
        self.subject = subject
        self.originalTransactionID = originalTransactionID
        self.transactionID = transactionID
        self.receiptID = receiptID
        self.sequence = sequence
        self.occurredAt = occurredAt
        self.recordedAt = recordedAt
        self.data = data
    }

    /// The JSON document: the events API's item and a webhook's body, byte for byte (sorted keys).
    public func encoded() -> [UInt8] {
        var writer = JSONWriter(capacity: 512 + data.utf8.count)
        write(to: &writer)
        return writer.bytes
    }

    /// Writes the document into a larger one (the events API's page).
    public func write(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member("app_id", appID.canonical)
        writer.key("data")
        writer.raw(data.utf8)
        writer.member("environment", environment)
        writer.member("id", id.canonical)
        writer.member("occurred_at", APITimestamp(occurredAt))
        writer.member("original_transaction_id", originalTransactionID)
        writer.member("receipt_id", receiptID?.canonical)
        writer.member("recorded_at", APITimestamp(recordedAt))
        writer.member("sequence", Int(sequence))
        writer.member("subject", subject)
        writer.member("transaction_id", transactionID)
        writer.member("type", type.rawValue)
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
    }
}

extension UUID {
    /// The RFC 9562 canonical text: lower-case hex. Every id receiptq prints uses it; look-ups
    /// accept either case (`UUID(uuidString:)` does).
    public var canonical: String {
        // Written digit by digit: `uuidString` formats with snprintf and then `lowercased()` copies
        // it again, and the ingest API prints a few ids per request.
        withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { text in
                let digits: StaticString = "0123456789abcdef"
                var at = 0
                for (index, byte) in bytes.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        text[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    text[at] = digits.utf8Start[Int(byte >> 4)]
                    text[at + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    at += 2
                }
                return at
            }
        }
    }
}
