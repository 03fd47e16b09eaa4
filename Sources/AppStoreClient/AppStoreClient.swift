import Curl
import Foundation
import ReceiptCore

/// `ReceiptVerifier` on libcurl: Apple's `verifyReceipt`, production first.
///
/// 21007 sends the receipt to the sandbox and 21008 back to production, at most once each way per
/// attempt, because Apple's sandbox has been seen answering 21007 itself. Transport failures, HTTP
/// errors and non-JSON bodies are reported as an outage, never as an invalid receipt.
///
/// Not thread-safe: each worker lane owns one (and with it one kept-alive connection).
public final class AppStoreClient: ReceiptVerifier {
    /// Endpoints and timeouts.
    public struct Configuration: Sendable {
        public var productionURL: String
        public var sandboxURL: String
        public var connectTimeout: Duration
        public var requestTimeout: Duration
        /// A CA bundle to trust instead of the system's (for a TLS mock); verification stays on.
        public var caInfo: String?

        /// Apple's real endpoints.
        public static let apple = Configuration(
            productionURL: "https://buy.itunes.apple.com/verifyReceipt",
            sandboxURL: "https://sandbox.itunes.apple.com/verifyReceipt")

        /// Creates a configuration. Timeouts default to 5 s to connect and 30 s in all: Apple's sandbox
        /// is known to take minutes at times, and a too-short timeout turns slowness into retries.
        public init(
            productionURL: String, sandboxURL: String, connectTimeout: Duration = .seconds(5),
            requestTimeout: Duration = .seconds(30), caInfo: String? = nil
        ) {
            self.productionURL = productionURL
            self.sandboxURL = sandboxURL
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.caInfo = caInfo
        }
    }

    private let configuration: Configuration
    private let easy: CurlEasy

    /// Creates a client with its own curl handle.
    /// - Throws: `CurlError` when libcurl cannot create a handle.
    public init(configuration: Configuration) throws {
        self.configuration = configuration
        var options = CurlOptions()
        options.connectTimeout = configuration.connectTimeout
        options.requestTimeout = configuration.requestTimeout
        options.caInfo = configuration.caInfo
        self.easy = try CurlEasy(options: options)
    }

    public func verify(_ request: VerificationRequest) -> VerificationReport {
        let body = Self.requestBody(request)
        var environment = AppStoreEnvironment.production
        var flipped: Set<AppStoreEnvironment> = []
        var calls: [AppleCall] = []
        while true {
            let (call, response) = send(body, to: environment)
            calls.append(call)
            guard let response else {
                // The classifier decides, so "what a failed call means" lives in one place.
                return VerificationReport(
                    verdict: AppleStatus.verdictForFailedCall(httpStatus: call.httpStatus), response: nil, calls: calls,
                    errorCode: call.errorCode)
            }
            let verdict = AppleStatus.verdict(status: response.status, isRetryable: response.isRetryable, from: environment)
            if case .switchEnvironment(let target) = verdict {
                guard flipped.insert(target).inserted else {
                    return VerificationReport(
                        verdict: .transient, response: response, calls: calls, errorCode: "environment_loop")
                }
                environment = target
                continue
            }
            let code: String? =
                switch verdict {
                case .valid, .invalid: nil
                default: "apple_\(response.status)"
                }
            return VerificationReport(verdict: verdict, response: response, calls: calls, errorCode: code)
        }
    }

    private func send(_ body: [UInt8], to environment: AppStoreEnvironment) -> (AppleCall, VerifyReceiptResponse?) {
        let url = environment == .production ? configuration.productionURL : configuration.sandboxURL
        let started = ContinuousClock.now
        func elapsed() -> Int { Int(((ContinuousClock.now - started).seconds * 1000).rounded()) }
        do {
            let response = try easy.perform(
                HTTPRequest(method: "POST", url: url, headers: [(name: "Content-Type", value: "application/json")], body: body))
            guard response.status == 200 else {
                let call = AppleCall(
                    endpoint: environment, httpStatus: response.status, appleStatus: nil, isRetryable: nil,
                    latencyMs: elapsed(), errorCode: "http_\(response.status)")
                return (call, nil)
            }
            guard let parsed = VerifyReceiptResponse(body: response.body) else {
                let call = AppleCall(
                    endpoint: environment, httpStatus: 200, appleStatus: nil, isRetryable: nil, latencyMs: elapsed(),
                    errorCode: "non_json_body")
                return (call, nil)
            }
            let call = AppleCall(
                endpoint: environment, httpStatus: 200, appleStatus: parsed.status, isRetryable: parsed.isRetryable,
                latencyMs: elapsed(), errorCode: nil)
            return (call, parsed)
        } catch let error as CurlError {
            let call = AppleCall(
                endpoint: environment, httpStatus: nil, appleStatus: nil, isRetryable: nil, latencyMs: elapsed(),
                errorCode: "transport_\(error.code)")
            return (call, nil)
        } catch {
            let call = AppleCall(
                endpoint: environment, httpStatus: nil, appleStatus: nil, isRetryable: nil, latencyMs: elapsed(),
                errorCode: "transport_other")
            return (call, nil)
        }
    }

    /// The JSON body Apple expects. The shared secret goes only here, never into logs or errors.
    static func requestBody(_ request: VerificationRequest) -> [UInt8] {
        var object: [String: JSONValue] = [
            "receipt-data": .string(request.receiptData),
            "exclude-old-transactions": .bool(request.excludeOldTransactions),
        ]
        if let secret = request.sharedSecret { object["password"] = .string(secret) }
        return (try? JSONEncoder().encode(JSONValue.object(object))).map { [UInt8]($0) } ?? []
    }
}
