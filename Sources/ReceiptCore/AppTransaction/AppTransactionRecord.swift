import Foundation

/// A user's app transaction (their purchase or download of the app itself), verified at the door
/// and stored per app, environment and user: what a paid-to-free migration reads (the original
/// application version and purchase date).
public struct AppTransactionRecord: Sendable, Equatable {
    public var appID: UUID
    /// `production` or `sandbox` (receiptq's spelling).
    public var environment: String
    public var userIdentifier: String
    /// Apple's `appTransactionId` (iOS 18.4+); nil for older devices.
    public var appTransactionID: String?
    public var bundleID: String
    public var appAppleID: Int64?
    public var applicationVersion: String?
    public var originalApplicationVersion: String
    public var originalPurchaseDate: Date
    public var receiptCreationDate: Date?
    public var preorderDate: Date?
    public var originalPlatform: String?
    /// When Apple signed it (newer replaces older; an older one never overwrites).
    public var signedDate: Date
    /// When receiptq stored it.
    public var storedAt: Date
    /// The payload as signed, unknown fields included.
    public var payload: JSONValue

    /// Creates a record.
    public init(
        appID: UUID, environment: String, userIdentifier: String, appTransactionID: String?, bundleID: String, appAppleID: Int64?,
        applicationVersion: String?, originalApplicationVersion: String, originalPurchaseDate: Date, receiptCreationDate: Date?,
        preorderDate: Date?, originalPlatform: String?, signedDate: Date, storedAt: Date, payload: JSONValue
    ) {
        self.appID = appID
        self.environment = environment
        self.userIdentifier = userIdentifier
        self.appTransactionID = appTransactionID
        self.bundleID = bundleID
        self.appAppleID = appAppleID
        self.applicationVersion = applicationVersion
        self.originalApplicationVersion = originalApplicationVersion
        self.originalPurchaseDate = originalPurchaseDate
        self.receiptCreationDate = receiptCreationDate
        self.preorderDate = preorderDate
        self.originalPlatform = originalPlatform
        self.signedDate = signedDate
        self.storedAt = storedAt
        self.payload = payload
    }

    /// The record of a verified payload for `userIdentifier`.
    /// - Parameter at: when it is stored (a payload without `signedDate` is dated then).
    public init(_ payload: JWSAppTransactionPayload, appID: UUID, userIdentifier: String, at: Date) {
        self.init(
            appID: appID, environment: AppleNotification.environment(payload.environment ?? "Production"), userIdentifier: userIdentifier,
            appTransactionID: payload.appTransactionID, bundleID: payload.bundleID, appAppleID: payload.appAppleID,
            applicationVersion: payload.applicationVersion, originalApplicationVersion: payload.originalApplicationVersion,
            originalPurchaseDate: payload.originalPurchaseDate ?? at, receiptCreationDate: payload.receiptCreationDate,
            preorderDate: payload.preorderDate, originalPlatform: payload.originalPlatform, signedDate: payload.signedDate ?? at,
            storedAt: at, payload: payload.json)
    }

    /// The API's JSON form (`app_transaction` of `POST`/`GET /client/app-transactions`).
    public func write(to writer: inout JSONWriter) {
        func time(_ date: Date?) -> APITimestamp? { date.map(APITimestamp.init) }
        writer.openObject()
        writer.member("app_apple_id", appAppleID.map { String($0) })
        writer.member("app_transaction_id", appTransactionID)
        writer.member("application_version", applicationVersion)
        writer.member("bundle_id", bundleID)
        writer.member("environment", environment)
        writer.member("original_application_version", originalApplicationVersion)
        writer.member("original_platform", originalPlatform)
        writer.member("original_purchase_date", time(originalPurchaseDate))
        writer.member("preorder_date", time(preorderDate))
        writer.member("receipt_creation_date", time(receiptCreationDate))
        writer.member("signed_date", time(signedDate))
        writer.member("stored_at", time(storedAt))
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
    }
}
