import Curl
import Dispatch
import Foundation
import OpenSSL
import ReceiptCore
import ServiceLifecycle

/// Delivers webhooks over libcurl's multi interface: thousands in flight on one thread, each
/// signed (``WebhookSignature``), TLS verified, redirects not followed, and, unless an admin
/// allowed the endpoint's private addresses, only public addresses connected to (checked on the
/// address libcurl resolved, right before it connects).
///
/// A `Service`: its two engines' threads start in ``run()``, which a service group lists before
/// the worker that delivers through it.
public final class WebhookClient: WebhookSender, Service, Sendable {
    /// Client settings.
    public struct Configuration: Sendable {
        /// How long one delivery may take, connection included (`WEBHOOK_TIMEOUT_SECONDS`).
        public var timeout: Duration
        /// Deliveries in flight at once.
        public var maxConcurrent: Int
        /// Connections kept per endpoint host.
        public var maxHostConnections: Int
        /// A PEM CA bundle to trust instead of the system's (tests with a local TLS receiver).
        public var caInfo: String?

        /// Creates a configuration (defaults: 10 s, 1,000 in flight, 100 connections per host).
        public init(timeout: Duration = .seconds(10), maxConcurrent: Int = 1000, maxHostConnections: Int = 100, caInfo: String? = nil) {
            self.timeout = timeout
            self.maxConcurrent = maxConcurrent
            self.maxHostConnections = maxHostConnections
            self.caInfo = caInfo
        }
    }

    /// Two engines, not one with a per-request rule: a connection kept alive for an allowed
    /// private host must never be reused by a customer URL naming the same host.
    private let publicOnly: CurlMulti
    private let unrestricted: CurlMulti

    /// Creates the client: one engine refusing non-public addresses, one for the endpoints an
    /// admin allowed them for; their threads start with ``run()``.
    public init(configuration: Configuration = Configuration()) {
        var options = CurlOptions()
        options.requestTimeout = configuration.timeout
        options.connectTimeout = min(configuration.timeout, .seconds(5))
        options.caInfo = configuration.caInfo
        options.userAgent = "receiptq-webhooks/1"
        // A receiver's answer is read for its status only.
        options.maxResponseBytes = 64 << 10
        var guarded = options
        guarded.publicAddressesOnly = true
        publicOnly = CurlMulti(
            options: guarded, maxConcurrent: configuration.maxConcurrent, maxHostConnections: configuration.maxHostConnections,
            name: "receiptq.hooks")
        unrestricted = CurlMulti(
            options: options, maxConcurrent: configuration.maxConcurrent, maxHostConnections: configuration.maxHostConnections,
            name: "receiptq.hooks")
    }

    /// Runs both engines' threads until graceful shutdown or cancellation, then closes their
    /// connections; when one cannot start, the other stops too.
    /// - Throws: `CurlError` when libcurl cannot create a multi handle.
    public func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.publicOnly.run() }
            group.addTask { try await self.unrestricted.run() }
        }
    }

    public func deliver(_ request: WebhookRequest, completion: @escaping @Sendable (WebhookReport) -> Void) {
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "application/json"),
            ("Receiptq-Event-Id", request.eventID.canonical),
            ("Receiptq-Event-Type", request.eventType),
            ("Receiptq-Signature", WebhookSignature.header(body: request.body, timestamp: request.timestamp, secrets: request.secrets)),
        ]
        let started = ContinuousClock.now
        (request.allowPrivate ? unrestricted : publicOnly).send(
            Curl.HTTPRequest(method: "POST", url: request.url, headers: headers, body: request.body)
        ) { result in
            let latency = Int(((ContinuousClock.now - started).seconds * 1000).rounded())
            switch result {
            case .success(let response):
                completion(
                    WebhookReport(
                        httpStatus: response.status, errorCode: (200..<300).contains(response.status) ? nil : .http(response.status),
                        latencyMs: latency))
            case .failure(let error) where error.code == .couldNotConnect && !request.allowPrivate:
                // A refused address looks like a failed connect to libcurl: say which it was. The
                // look-up blocks, and this runs on the engine thread that drives every transfer: an
                // endpoint that refuses connections must not stall the others, so it runs elsewhere.
                DispatchQueue.global().async {
                    let code: FailureCode = Self.resolvesOnlyPrivately(request.url) ? .addressNotAllowed : Self.failure(error)
                    completion(WebhookReport(httpStatus: nil, errorCode: code, latencyMs: latency))
                }
            case .failure(let error):
                completion(WebhookReport(httpStatus: nil, errorCode: Self.failure(error), latencyMs: latency))
            }
        }
    }

    /// Stops both engines: deliveries still in flight after `gracePeriod` end as transport errors.
    public func shutdown(gracePeriod: Duration = .zero) {
        publicOnly.shutdown(gracePeriod: gracePeriod)
        unrestricted.shutdown(gracePeriod: gracePeriod)
    }

    /// The domain's name for a transport failure: libcurl's classification, whose names it shares.
    static func failure(_ error: CurlError) -> FailureCode {
        .transport(TransportFailure(rawValue: error.code.description) ?? .other)
    }

    private static func resolvesOnlyPrivately(_ url: String) -> Bool {
        URLComponents(string: url)?.host.map(PublicAddressPolicy.resolvesOnlyPrivately) ?? false
    }
}

/// The `Receiptq-Signature` header: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, one
/// `v1` per valid secret (two during a rotation). A receiver recomputes the HMAC with its secret
/// over the raw body it received, compares in constant time with any `v1`, and rejects a `t` too
/// far from its clock (replays).
public enum WebhookSignature {
    /// The header value for `body` signed at `timestamp` with each of `secrets`.
    public static func header(body: [UInt8], timestamp: Int64, secrets: [String]) -> String {
        let signed = Array("\(timestamp).".utf8) + body
        let signatures = secrets.map { "v1=" + Digest.hex(Digest.hmacSHA256(key: Array($0.utf8), signed)) }
        return (["t=\(timestamp)"] + signatures).joined(separator: ",")
    }
}

extension WebhookClient {
    /// Sends `endpoint` a signed `webhook.test` delivery with a fresh client (run and stopped
    /// here: tests are rare) and reports the answer. Nothing is stored; no event exists.
    /// - Parameter origin: who asked, for the body's message (`receiptq webhooks test`, the dashboard).
    public static func sendTest(
        to endpoint: WebhookEndpointRecord, origin: String, configuration: Configuration, now: Date = Date()
    ) async throws -> WebhookReport {
        let eventID = JobID.make()
        var writer = JSONWriter()
        writer.openObject()
        writer.member("app_id", endpoint.appID.canonical)
        writer.key("data")
        writer.openObject()
        writer.member("message", "a test delivery from \(origin)")
        writer.closeObject()
        writer.member("id", eventID.canonical)
        writer.member("type", "webhook.test")
        writer.closeObject()
        let client = WebhookClient(configuration: configuration)
        let request = WebhookRequest(
            url: endpoint.url, body: writer.bytes, eventID: eventID, eventType: "webhook.test", secrets: endpoint.secrets,
            timestamp: Int64(now.timeIntervalSince1970), allowPrivate: endpoint.allowPrivate)
        // The client runs for this one delivery: cancelling its run() stops its threads, and the
        // group waits for them.
        return try await withThrowingTaskGroup(of: WebhookReport?.self) { group in
            group.addTask {
                try await client.run()
                return nil
            }
            let report = await withCheckedContinuation { continuation in client.deliver(request) { continuation.resume(returning: $0) } }
            group.cancelAll()
            try await group.waitForAll()
            return report
        }
    }
}
