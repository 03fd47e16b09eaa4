import Curl
import Foundation
import ReceiptCore
import ServiceLifecycle

/// `ReceiptVerifier` on libcurl's multi interface: Apple's `verifyReceipt`, production first.
///
/// 21007 sends the receipt to the sandbox and 21008 back to production, at most once each way per
/// attempt, because Apple's sandbox has been seen answering 21007 itself. Transport failures, HTTP
/// errors and non-JSON bodies are reported as an outage, never as an invalid receipt.
///
/// Thread-safe: one client per process; its ``CurlMulti`` engine runs every call on one thread,
/// thousands at once, over kept-alive connections. A `Service`: the thread starts in ``run()``, which
/// a service group lists before the worker that calls it.
public final class AppStoreClient: ReceiptVerifier, Service {
    /// Endpoints, timeouts and concurrency.
    public struct Configuration: Sendable {
        public var productionURL: String
        public var sandboxURL: String
        public var connectTimeout: Duration
        public var requestTimeout: Duration
        /// A CA bundle to trust instead of the system's (for a TLS mock); verification stays on.
        public var caInfo: String?
        /// Calls inside libcurl at once (and connections kept); more wait in the engine's queue.
        public var maxConcurrent: Int

        /// Apple's real endpoints.
        public static let apple = Configuration(
            productionURL: "https://buy.itunes.apple.com/verifyReceipt",
            sandboxURL: "https://sandbox.itunes.apple.com/verifyReceipt")

        /// Creates a configuration. Timeouts default to 5 s to connect and 30 s in all: Apple's sandbox
        /// is known to take minutes at times, and a too-short timeout turns slowness into retries.
        public init(
            productionURL: String, sandboxURL: String, connectTimeout: Duration = .seconds(5),
            requestTimeout: Duration = .seconds(30), caInfo: String? = nil, maxConcurrent: Int = 1000
        ) {
            self.productionURL = productionURL
            self.sandboxURL = sandboxURL
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.caInfo = caInfo
            self.maxConcurrent = maxConcurrent
        }
    }

    private let configuration: Configuration
    private let engine: CurlMulti
    /// When an answer arrived: its subscriptions' states are computed at that time.
    private let now: @Sendable () -> Date

    /// Creates a client; its HTTP engine starts with ``run()``.
    /// - Parameter now: the injected clock.
    public init(configuration: Configuration, now: @escaping @Sendable () -> Date = { Date() }) {
        self.configuration = configuration
        self.now = now
        var options = CurlOptions()
        options.connectTimeout = configuration.connectTimeout
        options.requestTimeout = configuration.requestTimeout
        options.caInfo = configuration.caInfo
        // HTTP/1.1 carries one call per connection: allow as many connections to Apple as calls.
        self.engine = CurlMulti(
            options: options, maxConcurrent: configuration.maxConcurrent, maxHostConnections: configuration.maxConcurrent,
            name: "receiptq.verify")
    }

    /// Runs the HTTP engine's thread until graceful shutdown or cancellation, then closes its
    /// connections (see `CurlMulti.run()`).
    /// - Throws: `CurlError` when libcurl cannot create the multi handle.
    public func run() async throws { try await engine.run() }

    /// Asks `verifyReceipt`; a Server API request is not this client's (``AppleValidation`` routes it).
    public func verify(_ request: ValidationRequest, completion: @escaping @Sendable (ValidationOutcome) -> Void) {
        guard case .verifyReceipt(let receiptData, let sharedSecret, let excludeOld) = request else {
            return completion(ValidationOutcome(verdict: .configurationError, calls: [], failure: .serverAPINotConfigured))
        }
        let body = Self.requestBody(receiptData: receiptData, sharedSecret: sharedSecret, excludeOldTransactions: excludeOld)
        step(VerificationSession(), .production, body: body) { report in
            completion(
                ValidationOutcome(
                    verdict: report.verdict, response: report.response, calls: report.calls, failure: report.failure, at: self.now(),
                    notice: report.notice))
        }
    }

    /// Stops the engine: calls still in flight after `gracePeriod` end as transport errors.
    public func shutdown(gracePeriod: Duration = .zero) { engine.shutdown(gracePeriod: gracePeriod) }

    private func step(
        _ session: VerificationSession, _ environment: AppStoreEnvironment, body: [UInt8],
        completion: @escaping @Sendable (VerifyReceiptReport) -> Void
    ) {
        let url = environment == .production ? configuration.productionURL : configuration.sandboxURL
        let started = ContinuousClock.now
        let request = Curl.HTTPRequest(method: "POST", url: url, headers: [(name: "Content-Type", value: "application/json")], body: body)
        engine.send(request) { result in
            let latency = Int(((ContinuousClock.now - started).seconds * 1000).rounded())
            let (call, response) = Self.interpret(result, from: environment, latencyMs: latency)
            let http = try? result.get()
            let notice = VerifyReceiptNotice(httpStatus: http?.status, header: { http?.header($0) })
            var session = session
            switch session.handle(call, response, notice: notice) {
            case .send(let next): self.step(session, next, body: body, completion: completion)
            case .finish(let report): completion(report)
            }
        }
    }

    /// One call's outcome as the audit trail records it, and Apple's answer when there was one.
    static func interpret(
        _ result: Result<Curl.HTTPResponse, CurlError>, from environment: AppStoreEnvironment, latencyMs: Int
    ) -> (AppleCall, VerifyReceiptResponse?) {
        func call(_ http: Int?, _ status: Int? = nil, _ retryable: Bool? = nil, error: FailureCode?) -> AppleCall {
            AppleCall(
                endpoint: environment, httpStatus: http, appleStatus: status, isRetryable: retryable, latencyMs: latencyMs,
                errorCode: error)
        }
        switch result {
        case .failure(let error):
            return (call(nil, error: .transport(TransportFailure(error))), nil)
        case .success(let response) where response.status != 200:
            return (call(response.status, error: .http(response.status)), nil)
        case .success(let response):
            guard let parsed = VerifyReceiptResponse(body: response.body) else { return (call(200, error: .nonJSONBody), nil) }
            return (call(200, parsed.status, parsed.isRetryable, error: nil), parsed)
        }
    }

    /// The JSON body Apple expects. The shared secret goes only here, never into logs or errors.
    ///
    /// Written directly: through `JSONEncoder` (a boxed tree, every `/` of the base64 escaped) it
    /// was 2 % of the worker's CPU at c100.
    static func requestBody(receiptData: String, sharedSecret: String?, excludeOldTransactions: Bool) -> [UInt8] {
        var writer = JSONWriter(capacity: receiptData.utf8.count + 128)
        writer.openObject()
        writer.member("receipt-data", receiptData)
        writer.member("exclude-old-transactions", excludeOldTransactions)
        writer.member("password", sharedSecret)
        writer.closeObject()
        return writer.bytes
    }
}

/// What one `verifyReceipt` attempt ended with, Apple's JSON included: the session's result, made
/// into the port's ``ValidationOutcome`` when it is handed over.
struct VerifyReceiptReport: Sendable, Equatable {
    var verdict: AppleVerdict
    var response: VerifyReceiptResponse?
    var calls: [AppleCall]
    var failure: FailureCode?
    var notice: VerifyReceiptNotice?
}

/// Apple's environment rules for one attempt, as a pure state machine: which endpoint to call
/// next, and when the attempt is over.
struct VerificationSession: Sendable {
    /// What to do after a call.
    enum Step: Sendable {
        case send(AppStoreEnvironment)
        case finish(VerifyReceiptReport)
    }

    private var flipped: Set<AppStoreEnvironment> = []
    private var calls: [AppleCall] = []
    private var notice = VerifyReceiptNotice()

    /// Takes the outcome of the call to `call.endpoint`.
    mutating func handle(_ call: AppleCall, _ response: VerifyReceiptResponse?, notice latest: VerifyReceiptNotice = VerifyReceiptNotice()) -> Step {
        calls.append(call)
        notice.gone = latest.gone
        notice.deprecation = latest.deprecation ?? notice.deprecation
        notice.sunset = latest.sunset ?? notice.sunset
        var step = decide(call, response)
        if case .finish(var report) = step, !notice.isEmpty {
            report.notice = notice
            step = .finish(report)
        }
        return step
    }

    private mutating func decide(_ call: AppleCall, _ response: VerifyReceiptResponse?) -> Step {
        if notice.gone {
            // 404/410: the endpoint is retired, which is not an outage (the circuit must not stop
            // the Server API's jobs for it) and not the receipt's fault.
            return .finish(
                VerifyReceiptReport(verdict: .transient, response: nil, calls: calls, failure: .verifyReceiptGone))
        }
        guard let response else {
            // The classifier decides, so "what a failed call means" lives in one place.
            return .finish(
                VerifyReceiptReport(
                    verdict: AppleStatus.verdictForFailedCall(httpStatus: call.httpStatus), response: nil, calls: calls,
                    failure: call.errorCode))
        }
        let verdict = AppleStatus.verdict(status: response.status, isRetryable: response.isRetryable, from: call.endpoint)
        if case .switchEnvironment(let target) = verdict {
            guard flipped.insert(target).inserted else {
                return .finish(VerifyReceiptReport(verdict: .transient, response: response, calls: calls, failure: .environmentLoop))
            }
            return .send(target)
        }
        let code: FailureCode? =
            switch verdict {
            case .valid, .invalid: nil
            default: .apple(response.status)
            }
        return .finish(VerifyReceiptReport(verdict: verdict, response: response, calls: calls, failure: code))
    }
}

extension TransportFailure {
    /// The domain's name for a libcurl failure, whose classification it shares name for name.
    init(_ error: CurlError) {
        self = TransportFailure(rawValue: error.code.description) ?? .other
    }
}
