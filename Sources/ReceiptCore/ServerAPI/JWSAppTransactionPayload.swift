import Foundation

/// Apple's `JWSAppTransactionDecodedPayload`: the customer's purchase (or download) of the app
/// itself, as StoreKit 2's `AppTransaction` and Get App Transaction Info sign it. Every documented
/// field typed, the whole payload (unknown fields included) in ``json``.
public struct JWSAppTransactionPayload: Sendable, Equatable {
    static let fields: [String: JWSFieldKind] = [
        "receiptType": .string, "environment": .string, "appAppleId": .integer, "bundleId": .string, "applicationVersion": .string,
        "versionExternalIdentifier": .integer, "receiptCreationDate": .date, "originalPurchaseDate": .date,
        "originalApplicationVersion": .string, "deviceVerification": .string, "deviceVerificationNonce": .string,
        "preorderDate": .date, "appTransactionId": .string, "originalPlatform": .string, "signedDate": .date,
    ]

    /// The whole payload as signed, unknown fields included.
    public let json: JSONValue
    public var appAppleID: Int64? { JWSFields.int(json["appAppleId"]) }
    public var bundleID: String { json["bundleId"]?.stringValue ?? "" }
    /// The version the device runs now (`CFBundleVersion`).
    public var applicationVersion: String? { json["applicationVersion"]?.stringValue }
    /// The version the customer first bought or downloaded: what a paid-to-free migration reads.
    public var originalApplicationVersion: String { json["originalApplicationVersion"]?.stringValue ?? "" }
    /// When the customer first bought or downloaded the app.
    public var originalPurchaseDate: Date? { JWSFields.date(json["originalPurchaseDate"]) }
    public var receiptCreationDate: Date? { JWSFields.date(json["receiptCreationDate"]) }
    /// Base64 of the device's SHA-384 of its identifier and the nonce (checked by the device, not here).
    public var deviceVerification: String? { json["deviceVerification"]?.stringValue }
    public var deviceVerificationNonce: String? { json["deviceVerificationNonce"]?.stringValue }
    /// Set when the customer pre-ordered the app.
    public var preorderDate: Date? { JWSFields.date(json["preorderDate"]) }
    /// The customer's unique id for this app (iOS 18.4+), shared by their transactions and
    /// by `RESCIND_CONSENT`.
    public var appTransactionID: String? { json["appTransactionId"]?.stringValue }
    /// `iOS`, `macOS`, `tvOS`, `visionOS`.
    public var originalPlatform: String? { json["originalPlatform"]?.stringValue }
    public var signedDate: Date? { JWSFields.date(json["signedDate"]) }
    /// `Production`, `Sandbox`, `Xcode`, `LocalTesting`: `receiptType` (or `environment`, the
    /// name Apple's newer payloads also carry).
    public var environment: String? { json["receiptType"]?.stringValue ?? json["environment"]?.stringValue }

    /// Checks and wraps a decoded payload.
    /// - Throws: `malformed_payload` without a bundle id, original application version or
    ///   original purchase date, or with a documented field of the wrong JSON type.
    public init(json: JSONValue) throws(JWSFailure) {
        try JWSFields.check(json, Self.fields, required: ["bundleId", "originalApplicationVersion", "originalPurchaseDate"])
        self.json = json
    }
}
