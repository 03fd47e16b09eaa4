import Curl
import Foundation
import Metrics
import OpenSSL
import ReceiptSignature
import Telemetry

extension ReceiptQueueApp {
    /// The JWS check every role uses (the door's signed transactions, app transactions and
    /// notifications; the worker's Server API answers), with the OCSP check of Apple's chains
    /// that `RECEIPTQ_OCSP` asks for. One checker per verifier: its cache is per process and role.
    static func jwsVerifier(
        _ configuration: AppConfiguration, roots: TrustStore, metrics: any MetricsFactory = MetricsSystem.factory
    ) -> JWSVerifier {
        let apple = configuration.apple
        guard apple.ocsp != .off else { return JWSVerifier(trustStore: roots) }
        let counters = Dictionary(
            uniqueKeysWithValues: OCSPCheckOutcome.allCases.map {
                ($0, Counter(label: MetricCatalog.ocspChecks, dimensions: [("outcome", $0.rawValue)], factory: metrics))
            })
        var options = CurlOptions()
        options.connectTimeout = apple.ocspTimeout
        options.requestTimeout = apple.ocspTimeout
        options.maxResponseBytes = 64 * 1024
        let settings = options
        let transport: OCSPRevocationChecker.Transport = { url, request in
            // A query happens once per certificate and cache period: a handle of its own, on the
            // verifying thread (see OCSPRevocationChecker for why that is acceptable).
            guard let easy = try? CurlEasy(options: settings),
                let response = try? easy.perform(
                    HTTPRequest(method: "POST", url: url, headers: [(name: "Content-Type", value: "application/ocsp-request")], body: request)),
                response.status == 200
            else { return nil }
            return response.body
        }
        let checker = OCSPRevocationChecker(
            policy: apple.ocsp, roots: roots.roots, transport: transport, retryAfterFailure: apple.ocspRetry,
            record: { counters[$0]?.increment() })
        return JWSVerifier(trustStore: roots, revocation: checker)
    }
}
