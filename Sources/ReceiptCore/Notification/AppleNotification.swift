import Foundation

/// Which form of App Store Server Notifications Apple sent.
public enum NotificationVersion: String, Sendable, Codable, CaseIterable {
    /// The older JSON form (`notification_type`, `password`, `unified_receipt`).
    case v1
    /// The signed form (`{"signedPayload": JWS}`).
    case v2
}

/// What became of a notification in Postgres: its audit row's `outcome`.
public enum NotificationOutcome: String, Sendable, CaseIterable, Codable {
    /// Its transaction and subscription state were applied.
    case applied
    /// Signed before what is already known of its subscription or transaction: recorded, not applied
    /// (an older notification arriving late never moves a state backwards).
    case stale
    /// A type that changes no state (`TEST`, `CONSUMPTION_REQUEST`, a summary) or a type not known
    /// yet: recorded and shown, never dropped.
    case recorded
}

/// Apple's notification types as documented in 2026 (V2 first, then V1's), for the metrics
/// catalogue and the dashboard's filter. A type not listed is still stored and shown.
public enum NotificationTypes {
    public static let v2: [String] = [
        "SUBSCRIBED", "DID_RENEW", "DID_CHANGE_RENEWAL_PREF", "DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW",
        "GRACE_PERIOD_EXPIRED", "EXPIRED", "OFFER_REDEEMED", "PRICE_INCREASE", "REFUND", "REFUND_DECLINED", "REFUND_REVERSED",
        "REVOKE", "RENEWAL_EXTENDED", "RENEWAL_EXTENSION", "CONSUMPTION_REQUEST", "ONE_TIME_CHARGE", "METADATA_UPDATE",
        "MIGRATION", "PRICE_CHANGE", "EXTERNAL_PURCHASE_TOKEN", "TEST", "RESCIND_CONSENT",
    ]
    public static let v1: [String] = [
        "CANCEL", "CONSUMPTION_REQUEST", "DID_CHANGE_RENEWAL_PREF", "DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW",
        "DID_RECOVER", "DID_RENEW", "INITIAL_BUY", "INTERACTIVE_RENEWAL", "PRICE_INCREASE_CONSENT", "REFUND", "REVOKE", "RENEWAL",
    ]
    /// Every documented type, once (the metrics label's bounded set; anything else is `other`).
    public static let all: [String] = v2 + v1.filter { !v2.contains($0) }

    /// Types that inform without changing a purchase or a subscription.
    static let informational: Set<String> = ["TEST", "CONSUMPTION_REQUEST", "EXTERNAL_PURCHASE_TOKEN", "RESCIND_CONSENT"]

    /// A parent or guardian withdrew consent for a child's use of the app (2025-11): the payload's
    /// `appData` names the app transaction, no purchase. Stored, and an event for the backend.
    public static let rescindConsent = "RESCIND_CONSENT"
}

/// One App Store Server Notification, decoded (its signatures were checked at the door), as the
/// worker applies it. Pure: ``effect`` says what it changes.
public struct AppleNotification: Sendable, Equatable {
    public var version: NotificationVersion
    /// Apple's `notificationUUID`; for V1, which has none, a digest of the body.
    public var uuid: String
    /// `notificationType` (V2) or `notification_type` (V1), as Apple spells it.
    public var type: String
    public var subtype: String?
    /// When Apple signed it (V2); for V1, when it arrived.
    public var signedDate: Date
    /// `production` or `sandbox` (nil: the payload does not say).
    public var environment: String?
    /// The decoded `signedTransactionInfo` (V2).
    public var transaction: JSONValue?
    /// The decoded `signedRenewalInfo` (V2).
    public var renewal: JSONValue?
    /// `data.status` (V2): 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
    public var status: Int?
    /// A `verifyReceipt`-shaped answer (V1's `unified_receipt`, or its top-level receipt fields).
    public var unifiedReceipt: JSONValue?
    /// The decoded `appData.signedAppTransactionInfo` (`RESCIND_CONSENT`).
    public var appTransaction: JSONValue?
    /// What operators see: the payload with nested JWS decoded and receipt data truncated.
    public var display: JSONValue

    /// Creates a notification (tests; the decoders below build them from Apple's bodies).
    public init(
        version: NotificationVersion, uuid: String, type: String, subtype: String? = nil, signedDate: Date, environment: String?,
        transaction: JSONValue? = nil, renewal: JSONValue? = nil, status: Int? = nil, unifiedReceipt: JSONValue? = nil,
        display: JSONValue = .object([:])
    ) {
        self.version = version
        self.uuid = uuid
        self.type = type
        self.subtype = subtype
        self.signedDate = signedDate
        self.environment = environment
        self.transaction = transaction
        self.renewal = renewal
        self.status = status
        self.unifiedReceipt = unifiedReceipt
        self.display = display
    }

    /// Decodes a V2 `signedPayload` whose signatures (and its nested ones) were checked at the door.
    /// - Throws: `malformed_payload` when it is not a notification.
    public static func v2(signedPayload: String) throws(JWSFailure) -> AppleNotification {
        let payload = try JWSNotificationPayload(json: decode(signedPayload))
        let transaction = try payload.signedTransactionInfo.map { jws throws(JWSFailure) in try decode(jws) }
        let renewal = try payload.signedRenewalInfo.map { jws throws(JWSFailure) in try decode(jws) }
        let appTransaction = try payload.signedAppTransactionInfo.map { jws throws(JWSFailure) in try decode(jws) }
        var display = payload.json
        if case .object(var data)? = payload.data {
            if let transaction { data["signedTransactionInfo"] = transaction }
            if let renewal { data["signedRenewalInfo"] = renewal }
            display = display.setting("data", .object(data))
        }
        if case .object(var appData)? = payload.appData, let appTransaction {
            appData["signedAppTransactionInfo"] = appTransaction
            display = display.setting("appData", .object(appData))
        }
        var notification = AppleNotification(
            version: .v2, uuid: payload.notificationUUID, type: payload.notificationType, subtype: payload.subtype,
            signedDate: JWSSigningDate(of: payload.json)?.date ?? .distantPast, environment: payload.environment.map(Self.environment),
            transaction: transaction, renewal: renewal, status: payload.status.map(Int.init), display: display)
        notification.appTransaction = appTransaction
        return notification
    }

    /// Reads a V1 body (its `password` already checked and removed at the door).
    /// - Parameters:
    ///   - uuid: the body's digest, computed at the door.
    ///   - receivedAt: when it arrived (V1 is not signed, so not dated).
    /// - Returns: nil without a `notification_type`.
    public static func v1(body: JSONValue, uuid: String, receivedAt: Date) -> AppleNotification? {
        guard let type = body["notification_type"]?.stringValue, !type.isEmpty else { return nil }
        // Before 2020 the receipt fields sat at the top level; since, in `unified_receipt`.
        var receipt = body["unified_receipt"]
        if receipt?.objectValue == nil {
            var fields: [String: JSONValue] = [:]
            for key in ["latest_receipt", "latest_receipt_info", "latest_expired_receipt_info", "pending_renewal_info"] {
                if let value = body[key] { fields[key] = value }
            }
            receipt = fields.isEmpty ? nil : .object(fields)
        }
        // Apple's current word on the subscription, as a valid answer's would be (older bodies and
        // some unified receipts carry no `status`).
        if receipt?["status"] == nil { receipt = receipt?.setting("status", .number(0)) }
        let named = body["environment"]?.stringValue ?? receipt?["environment"]?.stringValue
        return AppleNotification(
            version: .v1, uuid: uuid, type: type, signedDate: receivedAt, environment: named.map(Self.environment),
            unifiedReceipt: receipt, display: truncatingReceipts(body))
    }

    /// Apple's environment names (`Production`, `PROD`, `Sandbox`) as receiptq stores them.
    static func environment(_ name: String) -> String {
        name.lowercased().hasPrefix("prod") ? "production" : "sandbox"
    }

    private static func decode(_ jws: String) throws(JWSFailure) -> JSONValue {
        let compact = try CompactJWS(jws)
        guard let json = try? JSONValue.parse(compact.payload), json.objectValue != nil else { throw .malformedPayload }
        return json
    }

    /// Receipt data is a customer's purchase history: operators see its first characters only.
    static func truncatingReceipts(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members):
            var copy: [String: JSONValue] = [:]
            for (key, member) in members {
                if key == "latest_receipt" || key == "latest_expired_receipt", case .string(let text) = member, text.count > 24 {
                    copy[key] = .string("\(text.prefix(16))… (\(text.utf8.count) bytes)")
                } else {
                    copy[key] = truncatingReceipts(member)
                }
            }
            return .object(copy)
        case .array(let items): return .array(items.map(truncatingReceipts))
        default: return value
        }
    }
}

extension JSONValue {
    /// This object with `key` set to `value` (unchanged when not an object).
    func setting(_ key: String, _ value: JSONValue) -> JSONValue {
        guard case .object(var members) = self else { return self }
        members[key] = value
        return .object(members)
    }
}
