import Curl
import Dispatch
import Foundation
import Metrics
import ReceiptCore
import ServiceLifecycle

/// The App Store Server API on libcurl's multi interface: Get Transaction History (v2, every page)
/// and Get All Subscription Statuses, reduced to a ``ServerAPILedger`` from signature-checked JWS.
///
/// **Environments.** Production first (or the environment the job already knows); `4040010`
/// (transaction not found) sends the query to the other environment, and so does a production
/// `401`, which is what an app with no live release gets; at most one switch per attempt.
///
/// **Failures.** Every answer is classified by ``ServerAPIOutcome``: Apple's retryable codes are
/// `transient`, a transaction Apple does not know is `invalid`, a key Apple refuses in both
/// environments is a `configurationError` (dead letters, with a clear reason), transport errors and
/// 5xx are an `outage` for the circuit. A `429` ends the attempt with `rateLimitedUntil` (Apple's
/// `Retry-After`), which the planner turns into a wait that does not count against the job.
///
/// **Secrets.** The key only ever signs a JWT (``tokens``); neither appears in a report or log.
///
/// Thread-safe: one client per process. Responses are decoded and their JWS verified off the
/// engine's thread, so a 500-transaction history never stalls the other calls in flight. A `Service`:
/// the engine's thread starts in ``run()``.
public final class ServerAPIClient: Service, Sendable {
    /// Endpoints, timeouts and bounds.
    public struct Configuration: Sendable {
        /// Base URL of production (`/inApps/...` is appended).
        public var productionURL: String
        /// Base URL of the sandbox.
        public var sandboxURL: String
        public var connectTimeout: Duration
        public var requestTimeout: Duration
        /// A CA bundle to trust instead of the system's (for a TLS mock); verification stays on.
        public var caInfo: String?
        /// Calls inside libcurl at once.
        public var maxConcurrent: Int
        /// The most history pages one attempt follows (Apple returns 20 transactions a page).
        public var maxHistoryPages: Int

        /// The transfer options every Server API call uses (TLS verification stays on).
        var curlOptions: CurlOptions {
            var options = CurlOptions()
            options.connectTimeout = connectTimeout
            options.requestTimeout = requestTimeout
            options.caInfo = caInfo
            // A history page of 20 signed transactions is ~100 KB; 1000 pages never fit one body anyway.
            options.maxResponseBytes = 8 << 20
            return options
        }

        /// Apple's real endpoints.
        public static let apple = Configuration(
            productionURL: "https://api.storekit.itunes.apple.com", sandboxURL: "https://api.storekit-sandbox.itunes.apple.com")

        /// Creates a configuration.
        public init(
            productionURL: String, sandboxURL: String, connectTimeout: Duration = .seconds(5), requestTimeout: Duration = .seconds(30),
            caInfo: String? = nil, maxConcurrent: Int = 1000, maxHistoryPages: Int = 1000
        ) {
            self.productionURL = productionURL
            self.sandboxURL = sandboxURL
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.caInfo = caInfo
            self.maxConcurrent = maxConcurrent
            self.maxHistoryPages = max(1, maxHistoryPages)
        }
    }

    /// Makes the bearer token (an ES256 JWT from the app's key) for one query.
    public typealias TokenSource = @Sendable (ServerAPIQuery) throws -> String
    /// Verifies one JWS from Apple's answer: its decoded payload, or a bounded failure reason.
    public typealias PayloadVerifier = @Sendable (String) -> Result<JSONValue, JWSFailure>

    let configuration: Configuration
    private let engine: CurlMulti
    let tokens: TokenSource
    let verifyPayload: PayloadVerifier
    let throttle: ServerAPIThrottle?
    let meter: AppleCallMeter
    let now: @Sendable () -> Date
    let observedAt: @Sendable () -> Date

    /// Creates a client; its HTTP engine starts with ``run()``.
    /// - Parameters:
    ///   - tokens: signs the JWT for a query (from the app's key).
    ///   - verifyPayload: checks each JWS of Apple's answers.
    ///   - throttle: the deployment-wide rate limit (nil: only Apple's `429` limits the calls).
    ///   - meter: counts every call sent, by app, endpoint and purpose.
    ///   - now: the clock of pauses and rate limits (the machine's: the worker and Redis share it).
    ///   - observedAt: what an answer without a signed date is dated by (the subscription states
    ///     built from an answer are "as observed then", by default at the earliest `signedDate` of
    ///     its JWS): the machine's clock, or the conformance suite's simulated time.
    public init(
        configuration: Configuration, tokens: @escaping TokenSource, verifyPayload: @escaping PayloadVerifier,
        throttle: ServerAPIThrottle? = nil, meter: AppleCallMeter = AppleCallMeter(factory: MetricsSystem.factory),
        now: @escaping @Sendable () -> Date = { Date() }, observedAt: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.configuration = configuration
        self.throttle = throttle
        self.meter = meter
        self.tokens = tokens
        self.verifyPayload = verifyPayload
        self.now = now
        self.observedAt = observedAt
        self.engine = CurlMulti(
            options: configuration.curlOptions, maxConcurrent: configuration.maxConcurrent, maxHostConnections: configuration.maxConcurrent,
            name: "receiptq.srvapi")
    }

    /// Runs the HTTP engine's thread until graceful shutdown or cancellation, then closes its
    /// connections (see `CurlMulti.run()`).
    /// - Throws: `CurlError` when libcurl cannot create the multi handle.
    public func run() async throws { try await engine.run() }

    /// Runs `query` and calls `completion` exactly once, on any thread.
    public func verify(_ query: ServerAPIQuery, completion: @escaping @Sendable (ValidationOutcome) -> Void) {
        ServerAPIAttempt(client: self, query: query, completion: completion).start()
    }

    /// Stops the engine: calls still in flight after `gracePeriod` end as transport errors.
    public func shutdown(gracePeriod: Duration = .zero) { engine.shutdown(gracePeriod: gracePeriod) }

    /// One GET with the bearer token; the outcome, the audit record, on the engine's thread.
    func get(
        _ path: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, query: ServerAPIQuery,
        completion: @escaping @Sendable (ServerAPIOutcome, AppleCall) -> Void
    ) {
        let token: String
        do {
            token = try tokens(query)
        } catch {
            // The key cannot sign (not a P-256 PKCS#8 key): nothing Apple can fix.
            let call = AppleCall(
                endpoint: environment, httpStatus: nil, appleStatus: nil, isRetryable: nil, latencyMs: 0, errorCode: .serverAPIKeyUnusable)
            return completion(.failed(.configurationError, code: .serverAPIKeyUnusable), call)
        }
        let base = environment == .production ? configuration.productionURL : configuration.sandboxURL
        let request = Curl.HTTPRequest(
            method: "GET", url: base + path,
            headers: [(name: "Authorization", value: "Bearer \(token)"), (name: "Accept", value: "application/json")])
        let started = ContinuousClock.now
        let now = self.now
        meter.sent(app: query.bundleID, endpoint: endpoint, purpose: query.purpose, environment: environment)
        engine.send(request) { result in
            let latency = Int(((ContinuousClock.now - started).seconds * 1000).rounded())
            let response = try? result.get()
            // One read of the body: every answer used to be parsed a second time (by JSONDecoder,
            // 6 % of a first-sight validation's worker CPU) only to find an error code.
            let (outcome, appleCode) = ServerAPIOutcome.classify(
                status: response?.status, body: response?.body ?? [], retryAfter: response?.header("Retry-After"), now: now())
            let errorCode: FailureCode? =
                switch (outcome, result) {
                case (.answered, _): nil
                case (_, .failure(let error)): .transport(TransportFailure(error))
                case (.notInThisEnvironment, _): .apple(4_040_010)
                case (.unauthorized, _): .http(401)
                case (.rateLimited, _): .rateLimited
                case (.failed(_, let code), _): code
                }
            let call = AppleCall(
                endpoint: environment, httpStatus: response?.status, appleStatus: appleCode,
                isRetryable: appleCode.map { ServerAPIOutcome.retryableCodes.contains($0) }, latencyMs: latency, errorCode: errorCode)
            completion(outcome, call)
        }
    }
}
