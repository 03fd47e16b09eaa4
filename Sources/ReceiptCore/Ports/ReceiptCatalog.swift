import Foundation

/// The Postgres read side of the ingestion API.
public protocol ReceiptCatalog: Sendable {
    /// The app an API token belongs to, or nil (unknown or revoked token).
    func authenticate(token: String) async throws -> AppRecord?
    /// A stored receipt of `appID`.
    func receipt(id: UUID, appID: UUID) async throws -> ReceiptResource?
    /// The Cloud Softphone web service credentials registered under `username`, with their app, or
    /// nil (unknown username).
    func softphoneCredentials(username: String) async throws -> SoftphoneCredentials?
    /// The app whose notification URL is `/apple/notifications/{name}/{token}`, or nil (unknown
    /// name, no URL issued, or another token).
    func notificationApp(name: String, token: String) async throws -> AppRecord?
    /// Whether Postgres answers (readiness): without it no token can be checked.
    func ping() async -> Bool
}
