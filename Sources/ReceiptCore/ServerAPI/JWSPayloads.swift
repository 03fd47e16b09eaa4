import Foundation

/// The JSON type a documented field of a JWS payload must have.
enum JWSFieldKind: Sendable {
    case string, integer, date, boolean, stringArray, object
}

/// Type checks of Apple's JWS payloads: a documented field present with another JSON type is
/// `malformed_payload`; unknown fields are kept and never fail (Apple adds fields every year).
enum JWSFields {
    static func check(_ json: JSONValue, _ fields: [String: JWSFieldKind], required: [String]) throws(JWSFailure) {
        guard let object = json.objectValue else { throw .malformedPayload }
        for name in required where object[name] == nil || object[name] == .null { throw .malformedPayload }
        for (name, kind) in fields {
            guard let value = object[name], value != .null else { continue }
            let ok: Bool =
                switch (kind, value) {
                case (.string, .string), (.boolean, .bool), (.object, .object): true
                case (.integer, .number(let number)), (.date, .number(let number)):
                    number.isFinite && number == number.rounded() && abs(number) < 1e16
                case (.stringArray, .array(let items)): items.allSatisfy { if case .string = $0 { true } else { false } }
                default: false
                }
            guard ok else { throw .malformedPayload }
        }
    }

    static func date(_ value: JSONValue?) -> Date? { value?.millisecondsDate }

    static func int(_ value: JSONValue?) -> Int64? {
        guard case .number(let number)? = value else { return nil }
        return Int64(exactly: number)
    }
}

/// Apple's `JWSTransactionDecodedPayload`: one StoreKit 2 transaction, with every documented field
/// typed and the whole payload (unknown fields included) in ``json``.
public struct JWSTransactionPayload: Sendable, Equatable {
    static let fields: [String: JWSFieldKind] = [
        "transactionId": .string, "originalTransactionId": .string, "webOrderLineItemId": .string, "bundleId": .string,
        "productId": .string, "subscriptionGroupIdentifier": .string, "purchaseDate": .date, "originalPurchaseDate": .date,
        "expiresDate": .date, "quantity": .integer, "type": .string, "appAccountToken": .string, "inAppOwnershipType": .string,
        "signedDate": .date, "revocationReason": .integer, "revocationDate": .date, "isUpgraded": .boolean, "offerType": .integer,
        "offerIdentifier": .string, "environment": .string, "storefront": .string, "storefrontId": .string,
        "transactionReason": .string, "currency": .string, "price": .integer, "offerDiscountType": .string,
        "appTransactionId": .string, "offerPeriod": .string, "revocationType": .string, "revocationPercentage": .integer,
        "billingPlanType": .string,
    ]

    /// The whole payload as signed, unknown fields included.
    public let json: JSONValue
    public var transactionID: String { json["transactionId"]?.stringValue ?? "" }
    public var originalTransactionID: String { json["originalTransactionId"]?.stringValue ?? "" }
    public var webOrderLineItemID: String? { json["webOrderLineItemId"]?.stringValue }
    public var bundleID: String { json["bundleId"]?.stringValue ?? "" }
    public var productID: String { json["productId"]?.stringValue ?? "" }
    public var subscriptionGroupIdentifier: String? { json["subscriptionGroupIdentifier"]?.stringValue }
    public var purchaseDate: Date? { JWSFields.date(json["purchaseDate"]) }
    public var originalPurchaseDate: Date? { JWSFields.date(json["originalPurchaseDate"]) }
    public var expiresDate: Date? { JWSFields.date(json["expiresDate"]) }
    public var quantity: Int64? { JWSFields.int(json["quantity"]) }
    /// `Auto-Renewable Subscription`, `Non-Consumable`, `Consumable`, `Non-Renewing Subscription`.
    public var type: String? { json["type"]?.stringValue }
    public var appAccountToken: String? { json["appAccountToken"]?.stringValue }
    /// `PURCHASED` or `FAMILY_SHARED`.
    public var inAppOwnershipType: String? { json["inAppOwnershipType"]?.stringValue }
    public var signedDate: Date? { JWSFields.date(json["signedDate"]) }
    /// 0: another reason; 1: an issue with the app.
    public var revocationReason: Int64? { JWSFields.int(json["revocationReason"]) }
    public var revocationDate: Date? { JWSFields.date(json["revocationDate"]) }
    public var isUpgraded: Bool? { json["isUpgraded"]?.boolValue }
    /// 1 introductory, 2 promotional, 3 offer code, 4 win-back.
    public var offerType: Int64? { JWSFields.int(json["offerType"]) }
    public var offerIdentifier: String? { json["offerIdentifier"]?.stringValue }
    /// `Production`, `Sandbox`, `Xcode`, `LocalTesting`.
    public var environment: String? { json["environment"]?.stringValue }
    public var storefront: String? { json["storefront"]?.stringValue }
    public var storefrontID: String? { json["storefrontId"]?.stringValue }
    /// `PURCHASE` or `RENEWAL`.
    public var transactionReason: String? { json["transactionReason"]?.stringValue }
    public var currency: String? { json["currency"]?.stringValue }
    /// In milliunits of `currency`.
    public var price: Int64? { JWSFields.int(json["price"]) }
    public var offerDiscountType: String? { json["offerDiscountType"]?.stringValue }
    public var appTransactionID: String? { json["appTransactionId"]?.stringValue }
    /// ISO 8601 duration of the offer, e.g. `P1M`.
    public var offerPeriod: String? { json["offerPeriod"]?.stringValue }
    /// `MONTHLY` (a yearly commitment billed monthly, 2026-04), when Apple says.
    public var billingPlanType: String? { json["billingPlanType"]?.stringValue }
    /// How Apple took the transaction back, when it did and says (2025-12).
    public var revocationType: RevocationKind? { json["revocationType"]?.stringValue.flatMap(RevocationKind.init(rawValue:)) }
    /// The share refunded, in milli-percent (100000 is the whole), when Apple says.
    public var revocationPercentage: Int64? { JWSFields.int(json["revocationPercentage"]) }

    /// Checks and wraps a decoded payload.
    /// - Throws: `malformed_payload` without a transaction id, original id, product, bundle or
    ///   purchase date, or with a documented field of the wrong JSON type.
    public init(json: JSONValue) throws(JWSFailure) {
        try JWSFields.check(
            json, Self.fields, required: ["transactionId", "originalTransactionId", "productId", "bundleId", "purchaseDate"])
        self.json = json
    }
}

/// Apple's `JWSRenewalInfoDecodedPayload`: a subscription's renewal state.
public struct JWSRenewalInfoPayload: Sendable, Equatable {
    static let fields: [String: JWSFieldKind] = [
        "expirationIntent": .integer, "originalTransactionId": .string, "autoRenewProductId": .string, "productId": .string,
        "autoRenewStatus": .integer, "isInBillingRetryPeriod": .boolean, "priceIncreaseStatus": .integer,
        "gracePeriodExpiresDate": .date, "offerType": .integer, "offerIdentifier": .string, "signedDate": .date,
        "environment": .string, "recentSubscriptionStartDate": .date, "renewalDate": .date, "currency": .string,
        "renewalPrice": .integer, "offerDiscountType": .string, "eligibleWinBackOfferIds": .stringArray,
        "appAccountToken": .string, "appTransactionId": .string, "offerPeriod": .string,
    ]

    public let json: JSONValue
    public var originalTransactionID: String { json["originalTransactionId"]?.stringValue ?? "" }
    /// 1 cancelled, 2 billing error, 3 declined a price increase, 4 product unavailable, 5 other.
    public var expirationIntent: Int64? { JWSFields.int(json["expirationIntent"]) }
    public var autoRenewProductID: String? { json["autoRenewProductId"]?.stringValue }
    public var productID: String? { json["productId"]?.stringValue }
    /// 1 on, 0 off.
    public var autoRenewStatus: Int64? { JWSFields.int(json["autoRenewStatus"]) }
    public var isInBillingRetryPeriod: Bool? { json["isInBillingRetryPeriod"]?.boolValue }
    /// 0 not yet responded, 1 consented (or not needed).
    public var priceIncreaseStatus: Int64? { JWSFields.int(json["priceIncreaseStatus"]) }
    public var gracePeriodExpiresDate: Date? { JWSFields.date(json["gracePeriodExpiresDate"]) }
    public var offerType: Int64? { JWSFields.int(json["offerType"]) }
    public var offerIdentifier: String? { json["offerIdentifier"]?.stringValue }
    public var signedDate: Date? { JWSFields.date(json["signedDate"]) }
    public var environment: String? { json["environment"]?.stringValue }
    public var recentSubscriptionStartDate: Date? { JWSFields.date(json["recentSubscriptionStartDate"]) }
    public var renewalDate: Date? { JWSFields.date(json["renewalDate"]) }
    public var currency: String? { json["currency"]?.stringValue }
    public var renewalPrice: Int64? { JWSFields.int(json["renewalPrice"]) }
    public var offerDiscountType: String? { json["offerDiscountType"]?.stringValue }
    public var eligibleWinBackOfferIDs: [String] { json["eligibleWinBackOfferIds"]?.arrayValue?.compactMap(\.stringValue) ?? [] }
    public var appAccountToken: String? { json["appAccountToken"]?.stringValue }
    public var appTransactionID: String? { json["appTransactionId"]?.stringValue }
    public var offerPeriod: String? { json["offerPeriod"]?.stringValue }

    /// Checks and wraps a decoded payload.
    /// - Throws: `malformed_payload` without an original transaction id, or with a documented
    ///   field of the wrong JSON type.
    public init(json: JSONValue) throws(JWSFailure) {
        try JWSFields.check(json, Self.fields, required: ["originalTransactionId"])
        self.json = json
    }
}

/// Apple's `ResponseBodyV2DecodedPayload`: an App Store Server Notification V2.
public struct JWSNotificationPayload: Sendable, Equatable {
    static let fields: [String: JWSFieldKind] = [
        "notificationType": .string, "subtype": .string, "notificationUUID": .string, "version": .string, "signedDate": .date,
        "data": .object, "summary": .object, "externalPurchaseToken": .object, "appMetadata": .object, "appData": .object,
    ]
    static let dataFields: [String: JWSFieldKind] = [
        "environment": .string, "appAppleId": .integer, "bundleId": .string, "bundleVersion": .string,
        "signedTransactionInfo": .string, "signedRenewalInfo": .string, "status": .integer, "consumptionRequestReason": .string,
    ]
    /// `appData` (`RESCIND_CONSENT`, 2025-11): the app and its signed app transaction, no purchase.
    static let appDataFields: [String: JWSFieldKind] = [
        "environment": .string, "appAppleId": .integer, "bundleId": .string, "signedAppTransactionInfo": .string,
    ]

    public let json: JSONValue
    public var notificationType: String { json["notificationType"]?.stringValue ?? "" }
    public var subtype: String? { json["subtype"]?.stringValue }
    public var notificationUUID: String { json["notificationUUID"]?.stringValue ?? "" }
    public var version: String? { json["version"]?.stringValue }
    public var signedDate: Date? { JWSFields.date(json["signedDate"]) }
    /// The app and its signed transaction and renewal info (most notification types).
    public var data: JSONValue? { json["data"] }
    /// For `RENEWAL_EXTENSION` / `SUMMARY`.
    public var summary: JSONValue? { json["summary"] }
    public var externalPurchaseToken: JSONValue? { json["externalPurchaseToken"] }
    /// For `RESCIND_CONSENT`: the app and its signed app transaction.
    public var appData: JSONValue? { json["appData"] }
    public var environment: String? { (data ?? summary ?? appData)?["environment"]?.stringValue }
    public var bundleID: String? { (data ?? summary ?? appData)?["bundleId"]?.stringValue }
    public var appAppleID: Int64? { JWSFields.int((data ?? summary ?? appData)?["appAppleId"]) }
    /// The nested signed transaction (compact JWS), when sent.
    public var signedTransactionInfo: String? { data?["signedTransactionInfo"]?.stringValue }
    /// The nested signed renewal info (compact JWS), when sent.
    public var signedRenewalInfo: String? { data?["signedRenewalInfo"]?.stringValue }
    /// The subscription's status (1–5) at the notification, when sent.
    public var status: Int64? { JWSFields.int(data?["status"]) }
    /// The nested signed app transaction (compact JWS) of `appData`, when sent.
    public var signedAppTransactionInfo: String? { appData?["signedAppTransactionInfo"]?.stringValue }

    /// Checks and wraps a decoded payload.
    /// - Throws: `malformed_payload` without a type or UUID, or with a documented field of the
    ///   wrong JSON type.
    public init(json: JSONValue) throws(JWSFailure) {
        try JWSFields.check(json, Self.fields, required: ["notificationType", "notificationUUID"])
        if let data = json["data"] { try JWSFields.check(data, Self.dataFields, required: []) }
        if let appData = json["appData"] { try JWSFields.check(appData, Self.appDataFields, required: []) }
        self.json = json
    }
}

/// When Apple signed a JWS payload: the instant its certificate chain is judged at (as Apple's
/// `SignedDataVerifier` judges at `signedDate`), and whose `signedDate` that is.
public struct JWSSigningDate: Sendable, Equatable {
    /// Where the date was read.
    public enum Source: String, Sendable {
        /// The payload's own `signedDate`.
        case payload
        /// A notification's nested signed transaction (`data.signedTransactionInfo`).
        case signedTransactionInfo
        /// A notification's nested signed renewal info (`data.signedRenewalInfo`).
        case signedRenewalInfo
    }

    public var date: Date
    public var source: Source

    public init(date: Date, source: Source) {
        self.date = date
        self.source = source
    }

    /// The payload's `signedDate`. A V2 notification of the 2022 format has none: then the
    /// `signedDate` of its nested signed transaction (else renewal info), which the notification's
    /// signature covers too (the nested JWS is part of the payload it signs). Nil: no date at all.
    public init?(of payload: JSONValue) {
        if let date = JWSFields.date(payload["signedDate"]) {
            self.init(date: date, source: .payload)
            return
        }
        guard payload["notificationType"] != nil, let data = payload["data"] else { return nil }
        for source in [Source.signedTransactionInfo, .signedRenewalInfo] {
            // Read for its date only: the nested JWS is verified on its own, at this same date.
            guard let nested = data[source.rawValue]?.stringValue, let compact = try? CompactJWS(nested),
                let inner = try? JSONValue.parse(compact.payload), let date = JWSFields.date(inner["signedDate"])
            else { continue }
            self.init(date: date, source: source)
            return
        }
        return nil
    }
}

/// What a verified JWS payload is, by its fields.
public enum JWSPayloadKind: String, Sendable {
    case transaction
    case renewalInfo = "renewal_info"
    case notification
    case unknown

    /// Classifies a payload by the fields only each kind has.
    public init(_ payload: JSONValue) {
        if payload["notificationType"] != nil {
            self = .notification
        } else if payload["transactionId"] != nil {
            self = .transaction
        } else if payload["originalTransactionId"] != nil
            && (payload["autoRenewStatus"] != nil || payload["autoRenewProductId"] != nil || payload["expirationIntent"] != nil)
        {
            self = .renewalInfo
        } else {
            self = .unknown
        }
    }
}
