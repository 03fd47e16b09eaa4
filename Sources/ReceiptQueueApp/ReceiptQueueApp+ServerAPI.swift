import AppStoreClient
import Foundation
import Hiredis
import Logging
import ReceiptCore
import ReceiptSignature
import RedisJobQueue

extension ReceiptQueueApp {
    /// The App Store Server API client of a worker: JWTs from the apps' keys, every JWS of Apple's
    /// answers checked against the configured trust roots (Apple Root CA - G3), and the rate limit
    /// shared in Redis; every call counted by `meter`. Without trust roots the Server API is not used (nothing could be trusted).
    static func makeServerAPIClient(_ configuration: AppConfiguration, meter: AppleCallMeter, logger: Logger) -> ServerAPIClient? {
        guard let roots = try? trustStore(configuration) else {
            logger.warning("No RECEIPTQ_TRUST_ROOTS_DIR: the App Store Server API is not used (its answers could not be verified)")
            return nil
        }
        let verifier = JWSVerifier(trustStore: roots)
        let tokens = ServerAPITokenIssuer()
        var serverAPI = configuration.apple.serverAPI
        serverAPI.maxConcurrent = configuration.worker.concurrency
        return ServerAPIClient(
            configuration: serverAPI,
            tokens: { query in try tokens.token(for: query.key, bundleID: query.bundleID) },
            verifyPayload: { jws in
                verifier.verify(jws).map(\.payload)
            },
            throttle: ServerAPIThrottle {
                RedisServerAPIRateLimiter(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-throttle", logger: logger),
                    keys: configuration.keys, budget: configuration.apple.hourlyBudget)
            }, meter: meter)
    }
}
