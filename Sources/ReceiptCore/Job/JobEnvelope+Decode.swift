import Foundation

extension JobEnvelope {
    /// Parses an envelope from Redis.
    ///
    /// Workers decode every job they reserve, and `JSONDecoder` spent 6 % of a worker's CPU on it
    /// (a keyed container per object, a boxed value per field). The one-pass parser's tree is read
    /// field by field instead; anything that reader does not take as an envelope written by
    /// ``encoded()`` — a missing or mistyped field, an unknown enum value, an integer beyond 2⁵³ —
    /// goes to `JSONDecoder`, which decides and names the error, so both paths accept the same
    /// envelopes with the same values (the fuzz target checks that).
    /// - Throws: `DecodingError` when the bytes are not an envelope of a known version.
    public static func decode(_ bytes: [UInt8]) throws -> JobEnvelope {
        let envelope: JobEnvelope
        if let direct = decodeDirectly(bytes) {
            envelope = direct
        } else {
            envelope = try decodeWithFoundation(bytes)
        }
        guard envelope.header.version <= currentVersion else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "unknown envelope version"))
        }
        return envelope
    }

    /// The direct reader alone: nil where ``decode(_:)`` hands the bytes to `JSONDecoder` (the
    /// tests and the fuzz target hold it to ``decodeWithFoundation(_:)``).
    public static func decodeDirectly(_ bytes: [UInt8]) -> JobEnvelope? {
        (try? JSONValue.parse(bytes)).flatMap(EnvelopeReader.envelope).flatMap { try? JobEnvelope(wire: $0) }
    }

    /// `JSONDecoder`'s reading of the same bytes (the reference the direct reader is held to).
    public static func decodeWithFoundation(_ bytes: [UInt8]) throws -> JobEnvelope {
        let wire = try JSONDecoder.envelopes.decode(JobWire.self, from: Data(bytes))
        do {
            return try JobEnvelope(wire: wire)
        } catch let mismatch as WireMismatch {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: mismatch.description))
        }
    }
}

extension JSONDecoder {
    /// The envelope's format: dates as milliseconds.
    fileprivate static var envelopes: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }
}

/// Reads the fields `Codable` would, with its rules: a required field present and of its type, an
/// optional one absent, `null` or of its type. Nil for anything else (the caller falls back).
private enum EnvelopeReader {
    /// A field's value: absent (or `null`) is `.some(nil)`, a wrong type is nil.
    typealias Field<T> = T??

    static func envelope(_ tree: JSONValue) -> JobWire? {
        guard case .object(let fields) = tree else { return nil }
        guard let v = int(fields["v"]), let id = uuid(fields["id"]), let kind = raw(JobKind.self, fields["kind"]),
            let appID = uuid(fields["app_id"]), let attempt = int(fields["attempt"]), let enqueuedAt = date(fields["enqueued_at"]),
            let origin = raw(JobOrigin.self, fields["origin"]), let receipt = string(fields["receipt"]),
            let submission = submission(fields["submission"]), case .array(let calls)? = fields["history"],
            case let firstFailedAt? = optional(fields["first_failed_at"], date),
            case let lastFailedAt? = optional(fields["last_failed_at"], date),
            case let errorCode? = optional(fields["error_code"], string),
            case let errorMessage? = optional(fields["error_message"], string),
            case let style? = optional(fields["style"], { raw(ReceiptStyle.self, $0) }),
            case let bundleID? = optional(fields["bundle_id"], string),
            case let environment? = optional(fields["environment"], string),
            case let fraudReason? = optional(fields["fraud_reason"], string),
            case let replyTo? = optional(fields["reply_to"], string),
            case let subscription? = optional(fields["subscription"], repollTarget),
            case let source? = optional(fields["source"], { raw(JobSource.self, $0) }),
            case let transactionID? = optional(fields["transaction_id"], string),
            case let notificationID? = optional(fields["notification_id"], string),
            case let webhook? = optional(fields["webhook"], webhookTarget),
            case let importID? = optional(fields["import_id"], uuid),
            case let importEvents? = optional(fields["import_events"], bool),
            case let consumptionDeadline? = optional(fields["consumption_deadline"], date)
        else { return nil }
        var history: [AppleCall] = []
        history.reserveCapacity(calls.count)
        for call in calls {
            guard let read = appleCall(call) else { return nil }
            history.append(read)
        }
        return JobWire(
            v: v, id: id, kind: kind, appID: appID, attempt: attempt, enqueuedAt: enqueuedAt, firstFailedAt: firstFailedAt,
            lastFailedAt: lastFailedAt, errorCode: errorCode, errorMessage: errorMessage, origin: origin, receipt: receipt, style: style,
            bundleID: bundleID, environment: environment, submission: submission, history: history, fraudReason: fraudReason,
            replyTo: replyTo, subscription: subscription, source: source, transactionID: transactionID, notificationID: notificationID,
            webhook: webhook, importID: importID, importEvents: importEvents, consumptionDeadline: consumptionDeadline)
    }

    static func submission(_ value: JSONValue?) -> Submission? {
        guard case .object(let fields)? = value,
            case let userIdentifier? = optional(fields["user_identifier"], string),
            case let identifierForVendor? = optional(fields["identifier_for_vendor"], string),
            case let countryCode? = optional(fields["country_code"], string),
            case let ipAddress? = optional(fields["ip_address"], string),
            case let token? = optional(fields["app_account_token"], uuid)
        else { return nil }
        // Any JSON value is metadata; `null` is none, as `decodeIfPresent` reads it.
        let metadata = fields["metadata"].flatMap { $0 == .null ? nil : $0 }
        return Submission(
            userIdentifier: userIdentifier, identifierForVendor: identifierForVendor, countryCode: countryCode, ipAddress: ipAddress,
            metadata: metadata, appAccountToken: token)
    }

    static func appleCall(_ value: JSONValue) -> AppleCall? {
        guard case .object(let fields) = value, let endpoint = raw(AppStoreEnvironment.self, fields["endpoint"]),
            let latencyMs = int(fields["latency_ms"]), case let httpStatus? = optional(fields["http_status"], int),
            case let appleStatus? = optional(fields["apple_status"], int),
            case let isRetryable? = optional(fields["is_retryable"], bool),
            case let errorCode? = optional(fields["error_code"], string)
        else { return nil }
        return AppleCall(
            endpoint: endpoint, httpStatus: httpStatus, appleStatus: appleStatus, isRetryable: isRetryable, latencyMs: latencyMs,
            errorCode: errorCode.map(FailureCode.init(rawValue:)))
    }

    static func repollTarget(_ value: JSONValue) -> RepollTarget? {
        guard case .object(let fields) = value, let original = string(fields["original_transaction_id"]),
            let receiptID = uuid(fields["receipt_id"]), let sequence = int(fields["poll_seq"])
        else { return nil }
        return RepollTarget(originalTransactionID: original, receiptID: receiptID, pollSequence: sequence)
    }

    static func webhookTarget(_ value: JSONValue) -> WebhookTarget? {
        guard case .object(let fields) = value, let deliveryID = int(fields["delivery_id"]), let endpointID = uuid(fields["endpoint_id"]),
            let eventID = uuid(fields["event_id"]), let eventType = string(fields["event_type"])
        else { return nil }
        return WebhookTarget(deliveryID: Int64(deliveryID), endpointID: endpointID, eventID: eventID, eventType: eventType)
    }

    /// An optional field: absent or `null` → `.some(nil)`; present and read → `.some(value)`;
    /// present and not of the type → nil.
    static func optional<T>(_ value: JSONValue?, _ read: (JSONValue) -> T?) -> Field<T> {
        guard let value, value != .null else { return .some(nil) }
        return read(value).map { .some($0) }
    }

    static func string(_ value: JSONValue?) -> String? {
        guard case .string(let text)? = value else { return nil }
        return text
    }

    static func bool(_ value: JSONValue?) -> Bool? {
        guard case .bool(let flag)? = value else { return nil }
        return flag
    }

    /// An integer as `Codable` reads one, within the range a `Double` holds exactly (beyond it the
    /// parsed tree may have rounded the text: `JSONDecoder` reads that).
    static func int(_ value: JSONValue?) -> Int? {
        guard case .number(let number)? = value, number.rounded(.towardZero) == number, abs(number) <= 9_007_199_254_740_992 else {
            return nil
        }
        return Int(number)
    }

    static func date(_ value: JSONValue?) -> Date? { value?.millisecondsDate }

    static func uuid(_ value: JSONValue?) -> UUID? {
        guard case .string(let text)? = value else { return nil }
        return UUID(uuidString: text)
    }

    static func raw<T: RawRepresentable>(_: T.Type, _ value: JSONValue?) -> T? where T.RawValue == String {
        guard case .string(let text)? = value else { return nil }
        return T(rawValue: text)
    }
}
