import AppStoreClient
import Dispatch
import Foundation
import Hiredis
import IngestAPI
import Libpq
import Logging
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptScheduler
import ReceiptSignature
import RedisJobQueue
import ServiceLifecycle
import Telemetry

/// The schedule role's notification history sweep and what it owns.
public struct NotificationSweepRole: Sendable {
    /// The sweep itself (a test runs one pass with `sweep()`).
    public let sweep: NotificationHistorySweep
    /// What the role's service group runs: the sweep's intake and its HTTP client first, the sweep
    /// last, so they stop after it.
    public let service: ServiceGroup
    /// Closes the intake's connections, for a sweep used without ``service``.
    public let shutdown: @Sendable () -> Void
}

extension ReceiptQueueApp {
    /// The scheduler's recovery of missed notifications from Apple's Get Notification History,
    /// each one handed to the endpoint's own rule (checked, queued once per UUID); nil without trust
    /// roots or `RECEIPTQ_SECRETS_KEY` (nothing could be checked, or no key opened).
    /// - Parameter onlyApps: sweep only these apps (nil: all).
    public static func makeNotificationSweep(
        _ configuration: AppConfiguration, onlyApps: [UUID]? = nil, now: @escaping @Sendable () -> Date = { Date() },
        metrics: PrometheusExporter = PrometheusExporter(), logger: Logger
    ) throws -> NotificationSweepRole? {
        guard let roots = try? trustStore(configuration), let secretsKey = configuration.secretsKey else { return nil }
        let postgresPool = PostgresConnectionPool(configuration: configuration.postgres, size: 2, logger: logger)
        let redisPool = RedisConnectionPool(configuration: configuration.redis, size: 2, logger: logger)
        let intake = RedisIntake(
            configuration: configuration.redis, pool: redisPool, keys: configuration.keys,
            replication: replicaAcknowledgement(configuration, metrics: metrics),
            logger: logger)
        let ingestion = ReceiptIngestion(
            intake: intake, catalog: PostgresCatalog(pool: postgresPool), authenticity: ReceiptSignatureVerifier(trustStore: roots),
            signedPayloads: JWSVerifier(trustStore: roots), syncWait: .zero, now: now)
        let throttle = HistoryThrottle(configuration: configuration, logger: logger)
        let client = try ServerNotificationsClient(configuration: configuration.apple.serverAPI, meter: AppleCallMeter(factory: metrics))
        let sweep = NotificationHistorySweep(
            configuration: .init(interval: configuration.scheduler.notificationHistoryInterval),
            source: client,
            cursors: PostgresNotificationHistoryCursors(pool: postgresPool, secrets: try SecretBox(key: secretsKey), onlyApps: onlyApps),
            accept: { payload, app in
                switch await ingestion.ingest(notification: .object(["signedPayload": .string(payload)]), app: app, origin: .history, logger: logger)
                {
                case .accepted: return .accepted
                case .unavailable: return .unavailable
                case .forged(let reason):
                    logger.warning(
                        "Notification history: a notification was refused",
                        metadata: ["app.id": "\(app.id.uuidString.lowercased())", "reason": "\(reason)"])
                    return .refused
                case .wrongSecret, .invalid:
                    return .refused
                }
            },
            throttle: { app, environment in await throttle.wait(app: app, environment: environment, now: now) }, now: now,
            metrics: metrics, logger: logger)
        return NotificationSweepRole(
            sweep: sweep, service: ServiceGroup(services: [intake, client, sweep], logger: logger), shutdown: { intake.shutdown() })
    }
}

/// The sweep's share of the apps' Server API rate buckets (Notification History: 50 a second in
/// production, 5 in the sandbox), on its own Redis connection and thread: the bucket is blocking.
final class HistoryThrottle: @unchecked Sendable {
    // @unchecked: `limiter` is touched only on `queue`.
    private let queue = DispatchQueue(label: "receiptq.history-throttle")
    private var limiter: RedisServerAPIRateLimiter?
    private let configuration: AppConfiguration
    private let logger: Logger

    init(configuration: AppConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Returns once a call may go: at once, or at the slot the bucket booked for it; with the
    /// bucket full (or the app paused after a 429) it waits and asks again, like a worker's call.
    /// Should Redis not answer it goes at once: the sweep is slow anyway, and Apple's own 429
    /// still protects the app.
    func wait(app: AppRecord, environment: AppStoreEnvironment, now: @escaping @Sendable () -> Date) async {
        while !Task.isCancelled {
            let at = now()
            switch await reserve(app: app, environment: environment, now: at) {
            case .now: return
            case .booked(let slot):
                try? await Task.sleep(for: .milliseconds(max(0, Int(slot.timeIntervalSince(at) * 1000))))
                return
            case .later(let retry):
                try? await Task.sleep(for: .milliseconds(max(1, Int(retry.timeIntervalSince(at) * 1000))))
            }
        }
    }

    private func reserve(app: AppRecord, environment: AppStoreEnvironment, now: Date) async -> ServerAPISlot {
        await withCheckedContinuation { continuation in
            queue.async {
                do {
                    if self.limiter == nil {
                        self.limiter = RedisServerAPIRateLimiter(
                            connection: try RedisConnection(configuration: self.configuration.redis, label: "history-throttle", logger: self.logger),
                            keys: self.configuration.keys, budget: self.configuration.apple.hourlyBudget)
                    }
                    continuation.resume(
                        returning: try self.limiter?.reserve(
                            app: app.bundleID, endpoint: .notificationHistory, environment: environment, purpose: .historySweep, now: now,
                            bookingAhead: 2) ?? .now)
                } catch {
                    self.limiter = nil
                    continuation.resume(returning: .now)
                }
            }
        }
    }
}
