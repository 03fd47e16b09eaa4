import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

/// Workers read envelopes with a direct reader and fall back to `JSONDecoder`: both must read the
/// same envelopes the same way, and the direct reader must take what the writer writes.
@Suite("Job envelopes: the direct reader and JSONDecoder agree")
struct JobEnvelopeDecodeTests {
    @Test("Every envelope the writer writes is read directly, to what JSONDecoder reads")
    func writtenEnvelopes() throws {
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<300 {
            let written = Self.randomEnvelope(using: &generator).encoded()
            let direct = try #require(JobEnvelope.decodeDirectly(written))
            #expect(direct == (try JobEnvelope.decodeWithFoundation(written)))
            #expect(try JobEnvelope.decode(written) == direct)
        }
    }

    @Test("A field removed, null, or of another type: the direct reader declines or agrees, and decode answers as JSONDecoder does")
    func alteredFields() throws {
        var generator = SeededGenerator(seed: 8)
        let replacements: [JSONValue?] = [nil, .null, .number(1), .number(1.5), .number(1e300), .string("x"), .bool(true), .array([]), .object([:])]
        var declined = 0
        var agreed = 0
        for _ in 0..<20 {
            let written = Self.randomEnvelope(using: &generator).encoded()
            guard case .object(let fields) = try JSONValue.parse(written) else {
                Issue.record("not an object")
                return
            }
            // Top-level fields, and those of the nested objects (one level down).
            var paths: [[String]] = fields.keys.map { [$0] }
            for (key, value) in fields { if case .object(let inner) = value { paths += inner.keys.map { [key, $0] } } }
            if case .array(let calls)? = fields["history"], case .object(let call)? = calls.first { paths += call.keys.map { ["history", $0] } }
            for path in paths {
                for replacement in replacements {
                    let bytes = Self.writing(.object(fields), at: path, replacement)
                    let reference = try? JobEnvelope.decodeWithFoundation(bytes)
                    if let direct = JobEnvelope.decodeDirectly(bytes) {
                        #expect(direct == reference, "\(path) → \(String(describing: replacement))")
                        agreed += 1
                    } else {
                        declined += 1
                    }
                    #expect((try? JobEnvelope.decode(bytes)) == reference.flatMap { $0.header.version <= JobEnvelope.currentVersion ? $0 : nil })
                }
            }
        }
        // Both branches ran: optional fields set to null or removed are read directly.
        #expect(declined > 100 && agreed > 100)
    }

    /// `tree` with the value at `path` replaced (nil: removed), as JSON bytes.
    static func writing(_ tree: JSONValue, at path: [String], _ replacement: JSONValue?) -> [UInt8] {
        func replaced(_ value: JSONValue, _ path: ArraySlice<String>) -> JSONValue {
            guard let key = path.first else { return replacement ?? .null }
            switch value {
            case .object(var fields):
                if path.count == 1 {
                    fields[key] = replacement
                } else if let inner = fields[key] {
                    fields[key] = replaced(inner, path.dropFirst())
                }
                return .object(fields)
            case .array(var items) where !items.isEmpty:
                items[0] = replaced(items[0], path)
                return .array(items)
            default: return value
            }
        }
        var writer = JSONWriter()
        writer.value(replaced(tree, path[...]))
        return writer.bytes
    }

    /// An envelope of any payload case, with every optional field set or not.
    static func randomEnvelope(using generator: inout SeededGenerator) -> JobEnvelope {
        let awkward = ["", "x", "quote\"back\\slash", "line\nbreak", "\u{07}", "ü✓", "rq-node-1"]
        func text() -> String? { Bool.random(using: &generator) ? awkward.randomElement(using: &generator) : nil }
        func some() -> String { awkward.randomElement(using: &generator)! }
        func date() -> Date { Date(timeIntervalSince1970: Double(Int.random(in: 0...2_000_000_000_000, using: &generator)) / 1000) }
        func submission() -> Submission {
            Submission(
                userIdentifier: text(), identifierForVendor: text(), countryCode: text(), ipAddress: text(),
                metadata: Bool.random(using: &generator) ? .object(["k": .string(some()), "n": .number(2)]) : nil,
                // The app account token the app posted with it (issue 43): a UUID either way.
                appAccountToken: Bool.random(using: &generator) ? UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)) : nil)
        }
        func purchase() -> PurchaseJob {
            if Bool.random(using: &generator) {
                return .receipt(
                    ReceiptJob(
                        receipt: some(), style: Bool.random(using: &generator) ? .unified : nil, bundleID: text(), environment: text(),
                        submission: submission(), fraudReason: text(), transactionID: text()))
            }
            return .transaction(
                TransactionJob(
                    signedTransaction: text(), transactionID: text(), bundleID: text(), environment: text(), submission: submission(),
                    fraudReason: text()))
        }
        let payload: JobPayload
        switch Int.random(in: 0..<6, using: &generator) {
        case 0: payload = purchase().payload
        case 1: payload = purchase().payload
        case 2:
            payload = .importItem(ImportItem(importID: UUID(), emitsEvents: Bool.random(using: &generator), purchase: purchase()))
        case 3:
            payload = .repoll(
                RepollJob(
                    target: RepollTarget(
                        originalTransactionID: some(), receiptID: UUID(), pollSequence: Int.random(in: 0...1_000_000, using: &generator)),
                    latestReceipt: some(), style: Bool.random(using: &generator) ? .unified : nil, bundleID: text(), environment: text(),
                    userIdentifier: text()))
        case 4:
            payload = .notification(NotificationJob(notificationID: some(), body: some(), bundleID: text(), environment: text()))
        default:
            payload = .delivery(
                WebhookDelivery(
                    target: WebhookTarget(
                        deliveryID: Int64.random(in: 1...1 << 40, using: &generator), endpointID: UUID(), eventID: UUID(),
                        eventType: "purchase.created"),
                    body: some()))
        }
        let origins: [JobOrigin] = [.api, .softphone, .scheduler, .apple, .outbox, .history, .dashboard, .cli]
        var envelope = JobEnvelope(
            id: UUID(), appID: UUID(), enqueuedAt: date(), origin: origins.randomElement(using: &generator)!, payload: payload)
        envelope.replyTo = text()
        for _ in 0..<Int.random(in: 0...2, using: &generator) {
            envelope = envelope.failed(
                code: .apple(21005), message: some(),
                calls: [
                    AppleCall(
                        endpoint: Bool.random(using: &generator) ? .production : .sandbox, httpStatus: Bool.random(using: &generator) ? 200 : nil,
                        appleStatus: 21_005, isRetryable: Bool.random(using: &generator) ? true : nil, latencyMs: 12,
                        errorCode: text().map(FailureCode.init(rawValue:)))
                ], at: date())
        }
        return envelope
    }
}
