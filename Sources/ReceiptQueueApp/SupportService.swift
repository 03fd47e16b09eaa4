import AppStoreClient
import Foundation
import Hiredis
import IngestAPI
import Libpq
import Logging
import Metrics
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptSignature
import RedisJobQueue
import Telemetry

/// ``SupportDesk`` composed: the app (its key opened with `RECEIPTQ_SECRETS_KEY`) from Postgres,
/// the calls through ``ServerSupportClient`` (rate-limited, JWS checked), purchases Apple returns
/// queued through the same ingestion as the client API (one queue, one engine), and mass
/// extensions kept in ``PostgresMassExtensionLog``.
final class SupportService: SupportDesk {
    private let client: ServerSupportClient
    private let pool: PostgresConnectionPool
    private let secrets: SecretBox?
    private let ingestion: ReceiptIngestion
    private let customers: any CustomerDirectory
    private let massLog: any MassExtensionLog
    private let origin: JobOrigin
    private let logger: Logger
    private let now: @Sendable () -> Date

    init(
        client: ServerSupportClient, pool: PostgresConnectionPool, secrets: SecretBox?, ingestion: ReceiptIngestion, origin: JobOrigin,
        logger: Logger, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.client = client
        self.pool = pool
        self.secrets = secrets
        self.ingestion = ingestion
        self.customers = PostgresCustomerDirectory(pool: pool)
        self.massLog = PostgresMassExtensionLog(pool: pool)
        self.origin = origin
        self.logger = logger
        self.now = now
    }

    /// The app with its key opened.
    private func app(_ id: UUID) async throws -> AppRecord {
        let secrets = self.secrets
        guard
            let app = try await pool.withConnection(.readOnly, { try AppAdmin(connection: $0, secrets: secrets).listApps() }).first(where: {
                $0.id == id
            })
        else { throw SupportFailure.unknownApp }
        return app
    }

    func lookUpOrder(appID: UUID, orderID: String, userIdentifier: String?, environment: AppStoreEnvironment) async throws -> OrderLookupResult {
        let app = try await app(appID)
        let transactions = try await client.lookUpOrder(orderID, app: app, environment: environment)
        let queued = try await queue(transactions, app: app, user: { _ in userIdentifier })
        return OrderLookupResult(transactions: transactions, queued: queued)
    }

    func refundHistory(appID: UUID, transactionID: String, environment: AppStoreEnvironment) async throws -> RefundHistoryResult {
        let app = try await app(appID)
        let refunded = try await client.refundHistory(of: transactionID, app: app, environment: environment)
        // Only refunds receiptq does not know yet: a stored purchase without a cancellation date
        // (or none stored), validated again for the user it is stored for.
        var unknown: [SupportTransaction] = []
        var users: [String: String] = [:]
        for refund in refunded {
            let stored = try await customers.customer(CustomerQuery(appID: appID, transactionID: refund.transactionID)).purchases
                .filter { $0.transactionID == refund.transactionID }
            guard !stored.contains(where: { $0.cancellationDate != nil }) else { continue }
            if let user = stored.compactMap(\.userIdentifier).first { users[refund.transactionID] = user }
            unknown.append(refund)
        }
        let applied = try await queue(unknown, app: app, user: { users[$0.transactionID] })
        return RefundHistoryResult(refunded: refunded, applied: applied)
    }

    func extendRenewal(appID: UUID, _ request: RenewalExtension, environment: AppStoreEnvironment) async throws -> RenewalExtensionResult {
        let app = try await app(appID)
        var result = try await client.extendRenewal(request, app: app, environment: environment)
        guard result.succeeded else { return result }
        // A subscription receiptq stores is read again (by its id, for the user it is stored for),
        // so the stored renewal date is Apple's new one at once.
        let stored = try await customers.customer(CustomerQuery(appID: appID, transactionID: request.originalTransactionID)).purchases
            .filter { $0.originalTransactionID == request.originalTransactionID && $0.environment == environment.rawValue }
        guard !stored.isEmpty else { return result }
        var body: [String: JSONValue] = ["transaction_id": .string(request.originalTransactionID), "environment": .string(environment.rawValue)]
        if let user = stored.compactMap(\.userIdentifier).first { body["user_identifier"] = .string(user) }
        result.refreshQueued = try await queue(body, app: app) == 1
        return result
    }

    func massExtend(
        appID: UUID, _ request: MassRenewalExtension, environment: AppStoreEnvironment, requestedBy: String
    ) async throws -> MassExtensionRecord {
        let app = try await app(appID)
        try await client.massExtend(request, app: app, environment: environment)
        let record = MassExtensionRecord(
            appID: appID, environment: environment, productID: request.productID, requestIdentifier: request.requestIdentifier,
            days: request.days, reason: request.reason, storefrontCountryCodes: request.storefrontCountryCodes, requestedBy: requestedBy,
            requestedAt: now())
        try await massLog.record(record)
        return try await massLog.find(appID: appID, requestIdentifier: request.requestIdentifier) ?? record
    }

    func refreshMassExtension(appID: UUID, requestIdentifier: UUID) async throws -> MassExtensionRecord? {
        guard let stored = try await massLog.find(appID: appID, requestIdentifier: requestIdentifier) else { return nil }
        // A complete one never changes again: no call.
        guard !stored.isComplete else { return stored }
        let progress = try await client.massExtensionStatus(
            productID: stored.productID, requestIdentifier: requestIdentifier, app: try await app(appID), environment: stored.environment)
        try await massLog.update(appID: appID, requestIdentifier: requestIdentifier, progress: progress, at: now())
        return try await massLog.find(appID: appID, requestIdentifier: requestIdentifier)
    }

    func massExtensions(appID: UUID, limit: Int) async throws -> [MassExtensionRecord] {
        try await massLog.list(appID: appID, limit: limit)
    }

    func setAppAccountToken(appID: UUID, originalTransactionID: String, token: UUID, environment: AppStoreEnvironment) async throws {
        try await client.setAppAccountToken(token, originalTransactionID: originalTransactionID, app: try await app(appID), environment: environment)
    }

    func requestTestNotification(appID: UUID, environment: AppStoreEnvironment) async throws -> String {
        try await client.requestTestNotification(app: try await app(appID), environment: environment)
    }

    func testNotificationStatus(appID: UUID, token: String, environment: AppStoreEnvironment) async throws -> TestNotificationStatus {
        try await client.testNotificationStatus(token: token, app: try await app(appID), environment: environment)
    }

    /// Queues each transaction as the client API would a signed transaction for `user`: checked
    /// again at the door, then validated and stored by a worker.
    /// - Returns: how many were queued (a duplicate of one already queued counts: it is on its way).
    private func queue(_ transactions: [SupportTransaction], app: AppRecord, user: (SupportTransaction) -> String?) async throws -> Int {
        var queued = 0
        for transaction in transactions {
            var body: [String: JSONValue] = ["signed_transaction": .string(transaction.signed)]
            if let user = user(transaction) { body["user_identifier"] = .string(user) }
            queued += try await queue(body, app: app)
        }
        return queued
    }

    /// Queues one client API body (`signed_transaction` or `transaction_id`, `user_identifier`).
    private func queue(_ body: [String: JSONValue], app: AppRecord) async throws -> Int {
        guard case .success(let request) = SubmitTransactionRequest.parse(.object(body)) else { throw SupportFailure.malformedAnswer }
        switch await ingestion.ingest(transaction: request, submission: request.submission, app: app, origin: origin, logger: logger) {
        case .success(.unavailable): throw SupportFailure.queueUnavailable
        case .success: return 1
        case .failure: throw SupportFailure.malformedAnswer
        }
    }
}

extension ReceiptQueueApp {
    /// The support desk of the admin API, the dashboard and the CLI; nil without trust roots
    /// (Apple's answers could not be checked).
    /// - Parameters:
    ///   - maximumWait: how long a call waits for its rate-limit slot (the doors: 2 s; the CLI more).
    ///   - origin: the jobs' origin (`dashboard`, `cli`).
    static func makeSupportDesk(
        _ configuration: AppConfiguration, pool: PostgresConnectionPool, intake: any ReceiptIntake, maximumWait: TimeInterval, origin: JobOrigin,
        metrics: any MetricsFactory, logger: Logger
    ) throws -> (desk: SupportService, client: ServerSupportClient)? {
        guard let roots = try? trustStore(configuration) else { return nil }
        let verifier = JWSVerifier(trustStore: roots)
        let client = try ServerSupportClient(
            configuration: configuration.apple.serverAPI, verifyPayload: { verifier.verify($0).map(\.payload) },
            throttle: ServerAPIThrottle {
                RedisServerAPIRateLimiter(
                    connection: try RedisConnection(configuration: configuration.redis, label: "support-throttle", logger: logger),
                    keys: configuration.keys)
            }, maximumWait: maximumWait, meter: AppleCallMeter(factory: metrics))
        let ingestion = ReceiptIngestion(
            intake: intake, catalog: PostgresCatalog(pool: pool), authenticity: ReceiptSignatureVerifier(trustStore: roots),
            signedPayloads: verifier, syncWait: .zero, now: { Date() })
        let desk = SupportService(
            client: client, pool: pool, secrets: try configuration.secretsKey.map { try SecretBox(key: $0) }, ingestion: ingestion, origin: origin,
            logger: logger)
        return (desk, client)
    }
}
