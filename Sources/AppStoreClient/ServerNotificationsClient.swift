import Curl
import Foundation
import Metrics
import ReceiptCore
import ServiceLifecycle

/// The App Store Server API's notification endpoints, with the app's key: Get Notification
/// History (the scheduler's recovery sweep), Request a Test Notification and Get Test
/// Notification Status (`receiptq notifications test`).
///
/// Unlike ``ServerAPIClient`` these calls are few (a page per app every sweep, a test now and then),
/// so they go through the async client, one at a time per caller. Nothing returned is trusted
/// here: each `signedPayload` goes to the endpoint's rule, which checks its signatures.
///
/// It starts no thread; as a `Service` in the sweep's group, the end of ``run()`` closes its
/// kept-alive connections to Apple.
public final class ServerNotificationsClient: NotificationHistorySource, Service, Sendable {
    /// Why a call did not give an answer (bounded code; no body, no key).
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// `http_401`, `apple_4040008`, `transport_timeout`, `malformed_answer`, `server_api_key_missing`, …
        public var code: FailureCode
        public var description: String { "ServerNotificationsClient.Failure(\(code))" }
    }

    private let configuration: ServerAPIClient.Configuration
    private let client: HTTPClient
    private let tokens: ServerAPITokenIssuer
    private let meter: AppleCallMeter

    /// Creates the client.
    /// - Parameter meter: counts every call sent (the sweep's rate and budget are its caller's
    ///   `HistoryThrottle`).
    public init(
        configuration: ServerAPIClient.Configuration, tokens: ServerAPITokenIssuer = ServerAPITokenIssuer(),
        meter: AppleCallMeter = AppleCallMeter(factory: MetricsSystem.factory)
    ) throws {
        self.configuration = configuration
        self.tokens = tokens
        self.meter = meter
        self.client = try HTTPClient(options: configuration.curlOptions, lanes: 2)
    }

    /// Waits for graceful shutdown or cancellation, then closes the connections.
    public func run() async throws { try await client.run() }

    public func page(
        app: AppRecord, environment: AppStoreEnvironment, start: Date, end: Date, paginationToken: String?
    ) async throws -> NotificationHistoryPage {
        let body = JSONValue.object(["startDate": .number(Self.ms(start)), "endDate": .number(Self.ms(end))])
        let query = paginationToken.map { "?paginationToken=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" } ?? ""
        meter.sent(app: app.bundleID, endpoint: .notificationHistory, purpose: .historySweep, environment: environment)
        let answer = try await call("POST", "/inApps/v1/notifications/history\(query)", app: app, environment: environment, body: body)
        guard let items = answer["notificationHistory"]?.arrayValue else { throw Failure(code: .malformedAnswer) }
        return NotificationHistoryPage(
            signedPayloads: items.compactMap { $0["signedPayload"]?.stringValue }, paginationToken: answer["paginationToken"]?.stringValue,
            hasMore: answer["hasMore"]?.boolValue ?? false)
    }

    private func call(
        _ method: String, _ path: String, app: AppRecord, environment: AppStoreEnvironment, body: JSONValue?
    ) async throws -> JSONValue {
        guard let key = app.serverAPIKey else { throw Failure(code: .serverAPIKeyMissing) }
        let token: String
        do {
            token = try tokens.token(for: key, bundleID: app.bundleID)
        } catch {
            throw Failure(code: .serverAPIKeyUnusable)
        }
        let base = environment == .production ? configuration.productionURL : configuration.sandboxURL
        var headers: [(name: String, value: String)] = [("Authorization", "Bearer \(token)"), ("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let response: Curl.HTTPResponse
        do {
            response = try await client.send(
                Curl.HTTPRequest(method: method, url: base + path, headers: headers, body: body.map { Array($0.encodedText.utf8) } ?? []))
        } catch {
            throw Failure(code: .transport((error as? CurlError).map(TransportFailure.init) ?? .other))
        }
        let json = try? JSONValue.parse(response.body)
        guard (200..<300).contains(response.status) else {
            throw Failure(code: json?["errorCode"]?.intValue.map { .apple($0) } ?? .http(response.status))
        }
        guard let json, json.objectValue != nil else { throw Failure(code: .malformedAnswer) }
        return json
    }

    private static func ms(_ date: Date) -> Double { (date.timeIntervalSince1970 * 1000).rounded() }
}
