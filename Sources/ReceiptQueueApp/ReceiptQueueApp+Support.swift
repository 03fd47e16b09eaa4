import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import RedisJobQueue
import Telemetry

extension ReceiptQueueApp {
    /// The support desk for one `receiptq support` command: its own Postgres and Redis pools, the
    /// desk (jobs queued with origin `cli`, a call waiting up to a minute for its rate-limit slot:
    /// a person at a shell would rather wait than retry), and the audit log the command writes its
    /// line to before the call.
    public final class SupportSession: Sendable {
        /// The desk.
        public let desk: any SupportDesk
        private let audit: PostgresOperators
        private let closeAll: @Sendable () -> Void

        /// Opens the pools (connections are made on first use).
        /// - Throws: `ConfigurationError` without trust roots (Apple's answers could not be checked),
        ///   or for a secrets key that cannot be read.
        public init(_ configuration: AppConfiguration, logger: Logger) throws {
            let postgresPool = PostgresConnectionPool(configuration: configuration.postgres, size: 2, logger: logger)
            let redisPool = RedisConnectionPool(configuration: configuration.redis, size: 1, logger: logger)
            let intake = RedisIntake(configuration: configuration.redis, pool: redisPool, keys: configuration.keys, logger: logger)
            guard
                let made = try ReceiptQueueApp.makeSupportDesk(
                    configuration, pool: postgresPool, intake: intake, maximumWait: 60, origin: .cli, metrics: PrometheusExporter(), logger: logger)
            else {
                postgresPool.close()
                redisPool.close()
                throw ConfigurationError(
                    variable: "RECEIPTQ_TRUST_ROOTS_DIR", reason: "must name Apple's root certificates: the support endpoints' answers are checked")
            }
            desk = made.desk
            audit = PostgresOperators(pool: postgresPool)
            closeAll = {
                intake.shutdown()
                redisPool.close()
                postgresPool.close()
            }
        }

        /// Runs `body` after writing `action`'s audit line (no line, no call), and settles the line.
        public func run<T: Sendable>(_ action: AuditAction, jobCount: (T) -> Int? = { _ in nil }, _ body: () async throws -> T) async throws -> T {
            let id = try await audit.begin(action)
            do {
                let result = try await body()
                try? await audit.settle(id, jobCount: jobCount(result), failed: false)
                return result
            } catch {
                try? await audit.settle(id, jobCount: nil, failed: true)
                throw error
            }
        }

        /// Closes the pools.
        public func close() { closeAll() }
    }
}

extension AuditAction {
    /// This action on app `appID`, naming `target` and the customers it touched.
    public func on(app appID: UUID, target: String, users: [String] = []) -> AuditAction {
        var copy = on(appID, target)
        copy.userIdentifiers = users
        return copy
    }
}
