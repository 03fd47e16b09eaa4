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
    static func makeServerAPIClient(
        _ configuration: AppConfiguration, meter: AppleCallMeter, logger: Logger, observedAt: @escaping @Sendable () -> Date = { Date() }
    ) -> ServerAPIClient? {
        guard let roots = try? trustStore(configuration) else {
            logger.warning("No RECEIPTQ_TRUST_ROOTS_DIR: the App Store Server API is not used (its answers could not be verified)")
            return nil
        }
        let verifier = jwsVerifier(configuration, roots: roots)
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
            }, meter: meter, observedAt: observedAt)
    }

    /// The worker's answers to Apple's consumption requests: Send Consumption Information with the
    /// app's key, through the same shared buckets as the validations (purpose `refund_defence`);
    /// nil without trust roots, like the Server API client.
    static func makeConsumptionSender(_ configuration: AppConfiguration, meter: AppleCallMeter, logger: Logger) throws -> ServerSupportClient? {
        guard let roots = try? trustStore(configuration) else { return nil }
        let verifier = jwsVerifier(configuration, roots: roots)
        return try ServerSupportClient(
            configuration: configuration.apple.serverAPI, verifyPayload: { verifier.verify($0).map(\.payload) },
            throttle: ServerAPIThrottle {
                RedisServerAPIRateLimiter(
                    connection: try RedisConnection(configuration: configuration.redis, label: "worker-consumption-throttle", logger: logger),
                    keys: configuration.keys, budget: configuration.apple.hourlyBudget)
            },
            // A slot a few seconds ahead is waited for; a later one sends the job back with Apple's
            // deadline still in view (the planner never retries past it).
            maximumWait: 5, meter: meter)
    }
}
