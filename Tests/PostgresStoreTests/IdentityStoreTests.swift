import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The store's side of identity against real Postgres: who owns a ledger row a second user
/// presents under each transfer rule, what a re-poll may not undo, tokens attaching ownerless rows
/// in the worker's batch, and merges of user ids (chains, cycles, conflicts lifted).
@Suite("Postgres store: transfer rules, app account tokens, aliases", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct IdentityStoreTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    let app: AppRecord

    init() throws {
        (configuration, connection, app) = try TestSystem.newApp(named: "identity", bundleID: "com.example.identity")
    }

    /// A subscription transaction presented by `user` at `presentedAt` (the door's acceptance;
    /// `repollOf`: that stored receipt re-polled instead).
    func record(
        user: String?, transaction: String, subscription: Bool = true, token: UUID? = nil, repollOf receipt: UUID? = nil,
        presentedAt: Date = Date()
    ) -> ValidationRecord {
        let payload: JobPayload =
            if let receipt {
                .repoll(
                    RepollJob(
                        target: RepollTarget(originalTransactionID: transaction, receiptID: receipt, pollSequence: 1), latestReceipt: "MIIr",
                        environment: "sandbox", userIdentifier: user))
            } else {
                .receipt(ReceiptJob(receipt: "MIIr", style: .unified, bundleID: "com.example.identity", submission: Submission(userIdentifier: user)))
            }
        let envelope = JobEnvelope(id: JobID.make(), appID: app.id, enqueuedAt: presentedAt, origin: .api, payload: payload)
        var purchase = InAppPurchase(
            productID: "com.example.yearly", transactionID: transaction, originalTransactionID: transaction,
            purchaseDate: Date(timeIntervalSince1970: 1_700_000_000), expiresDate: subscription ? Date(timeIntervalSince1970: 2_000_000_000) : nil)
        purchase.appAccountToken = token
        let state = SubscriptionState(
            originalTransactionID: transaction, productID: "com.example.yearly", status: .active, expiresAt: purchase.expiresDate,
            latestTransactionID: transaction, observedAt: Date())
        return ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: [purchase], latestReceipt: nil, calls: [],
            validatedAt: Date(), subscriptions: subscription ? [PlannedSubscription(state: state, nextPollAt: nil)] : [])
    }

    func save(_ records: ValidationRecord...) throws {
        for result in try PostgresReceiptStore(connection: connection).save(records) { _ = try result.get() }
    }

    func owners(_ transaction: String) throws -> (purchase: String?, subscription: String?, conflict: Bool?) {
        let purchase = try connection.query("SELECT user_identifier, is_conflict FROM in_app_purchases WHERE transaction_id = \(transaction)").rows
            .first
        let subscription = try connection.query(
            "SELECT user_identifier FROM subscriptions WHERE app_id = \(app.id) AND original_transaction_id = \(transaction)"
        ).rows.first
        return (purchase?.string("user_identifier"), subscription?.string("user_identifier"), purchase?.bool("is_conflict"))
    }

    func events(_ type: String, subject: String) throws -> [String] {
        try connection.query(
            "SELECT user_identifier FROM events WHERE app_id = \(app.id) AND type = \(type) AND subject = \(subject) ORDER BY id"
        ).rows.compactMap { $0.string("user_identifier") }
    }

    /// The `v` column of `sql`'s rows.
    func column(_ sql: PostgresQuery) throws -> [String] { try connection.query(sql).rows.compactMap { $0.string("v") } }

    func withIdentity<T>(_ body: (PostgresIdentity) async throws -> T) async throws -> T {
        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        return try await body(PostgresIdentity(pool: pool))
    }

    @Test(
        "keep_first flags the second user; transfer_to_latest moves the row and its subscription, told to both, and a re-poll of the loser's receipt does not move it back"
    )
    func transferToLatest() async throws {
        let kept = "keep-\(UUID())"
        try save(record(user: "alice", transaction: kept))
        try save(record(user: "bob", transaction: kept))
        #expect(try owners(kept) == ("alice", "alice", true))

        try await withIdentity { try await $0.setTransferRule(.transferToLatest, appID: app.id, audit: AuditAction.commandLine("app.transfer_rule")) }
        #expect(try await withIdentity { try await $0.transferRule(appID: app.id) } == .transferToLatest)
        let moved = "move-\(UUID())"
        let alices = record(user: "alice", transaction: moved)
        try save(alices)
        try save(record(user: "bob", transaction: moved))
        #expect(try owners(moved) == ("bob", "bob", false))
        #expect(try events("customer.transferred", subject: "subscription:\(moved)") == ["alice", "bob"])
        // Replayed: nothing moves, nothing more is told.
        try save(record(user: "bob", transaction: moved))
        try save(record(user: "alice", transaction: moved, repollOf: alices.envelope.id))
        #expect(try owners(moved).purchase == "bob")
        #expect(try events("customer.transferred", subject: "subscription:\(moved)").count == 2)
        // Presented by alice again: she is the latest now.
        try save(record(user: "alice", transaction: moved))
        #expect(try owners(moved) == ("alice", "alice", false))
        #expect(try events("customer.transferred", subject: "subscription:\(moved)").count == 4)
        await #expect(throws: TransferRuleAdminError.unknownApp) {
            try await withIdentity { try await $0.setTransferRule(.share, appID: UUID(), audit: AuditAction.commandLine("app.transfer_rule")) }
        }
    }

    /// Found by the conformance suite (shared_apple_account under 429s): Apple held the first
    /// user's validation past a second user's presentation, so the second was stored first and
    /// keep_first kept the wrong user. Claims are dated by the door's acceptance now.
    @Test(
        "Claims are ordered by presentation, not storage: keep_first gives the row to an earlier claim stored late, transfer_to_latest keeps a later one stored first"
    )
    func claimOrder() async throws {
        let presented = Date(timeIntervalSince1970: 1_800_000_000)
        let held = "held-\(UUID())"
        // alice presented it first; Apple held her validation, so bob's, a minute later, was stored first.
        try save(record(user: "bob", transaction: held, presentedAt: presented))
        #expect(try owners(held) == ("bob", "bob", false))
        try save(record(user: "alice", transaction: held, presentedAt: presented - 60))
        #expect(try owners(held) == ("alice", "alice", true))
        #expect(try column("SELECT conflict_user_identifier AS v FROM in_app_purchases WHERE transaction_id = \(held)") == ["bob"])
        #expect(try events("purchase.conflict", subject: "purchase:\(held)") == ["bob"])
        #expect(try events("customer.transferred", subject: "subscription:\(held)") == ["bob", "alice"])
        // Replayed, re-polled, or presented again by either: nothing moves, nothing more is told.
        try save(record(user: "alice", transaction: held, presentedAt: presented - 60))
        try save(record(user: "bob", transaction: held, presentedAt: presented + 60))
        try save(record(user: "bob", transaction: held, presentedAt: presented))
        #expect(try owners(held) == ("alice", "alice", true))
        #expect(try events("purchase.conflict", subject: "purchase:\(held)").count == 1)
        #expect(try events("customer.transferred", subject: "subscription:\(held)").count == 2)

        // The owner's own earlier presentation, stored late, dates her claim: carol's, between
        // dan's two, comes second.
        let owned = "owned-\(UUID())"
        try save(record(user: "dan", transaction: owned, presentedAt: presented + 120))
        try save(record(user: "dan", transaction: owned, presentedAt: presented))
        try save(record(user: "carol", transaction: owned, presentedAt: presented + 60))
        #expect(try owners(owned) == ("dan", "dan", true))
        #expect(try events("purchase.conflict", subject: "purchase:\(owned)") == ["carol"])

        try await withIdentity { try await $0.setTransferRule(.transferToLatest, appID: app.id, audit: AuditAction.commandLine("app.transfer_rule")) }
        let latest = "latest-\(UUID())"
        // erin presented it after frank, whose validation Apple held: erin keeps it.
        try save(record(user: "erin", transaction: latest, presentedAt: presented))
        try save(record(user: "frank", transaction: latest, presentedAt: presented - 60))
        #expect(try owners(latest) == ("erin", "erin", false))
        #expect(try events("customer.transferred", subject: "subscription:\(latest)").isEmpty)
        // frank presenting it again, after erin, is the latest.
        try save(record(user: "frank", transaction: latest, presentedAt: presented + 60))
        #expect(try owners(latest) == ("frank", "frank", false))
        #expect(try events("customer.transferred", subject: "subscription:\(latest)") == ["erin", "frank"])
    }

    @Test("share keeps the owner, records each later user once, and flags no conflict")
    func share() async throws {
        try await withIdentity { try await $0.setTransferRule(.share, appID: app.id, audit: AuditAction.commandLine("app.transfer_rule")) }
        let shared = "share-\(UUID())"
        try save(record(user: "alice", transaction: shared, subscription: false))
        try save(record(user: "bob", transaction: shared, subscription: false))
        try save(record(user: "carol", transaction: shared, subscription: false))
        try save(record(user: "bob", transaction: shared, subscription: false))
        #expect(try owners(shared).purchase == "alice")
        #expect(try owners(shared).conflict == false)
        #expect(try column("SELECT user_identifier AS v FROM purchase_shares WHERE transaction_id = \(shared) ORDER BY 1") == ["bob", "carol"])
        #expect(try events("purchase.conflict", subject: "purchase:\(shared)").isEmpty)
    }

    @Test("A purchase without a user takes its token's user in the worker's batch; one stored before the mapping is attached by it")
    func tokens() async throws {
        let token = UUID()
        let registered = try await withIdentity { try await $0.register(appAccountToken: token, userIdentifier: "dana", appID: app.id) }
        #expect(registered.attachedPurchases == 0)
        let first = "tok-\(UUID())"
        try save(record(user: nil, transaction: first, token: token))
        #expect(try owners(first) == ("dana", "dana", false))

        let later = UUID()
        let second = "tok-\(UUID())"
        try save(record(user: nil, transaction: second, token: later))
        #expect(try owners(second) == (nil, nil, false))
        let attached = try await withIdentity { try await $0.register(appAccountToken: later, userIdentifier: "erin", appID: app.id) }
        #expect(attached.attachedPurchases == 1)
        #expect(try owners(second) == ("erin", "erin", false))
        await #expect(throws: CustomerIdentityError.tokenTaken) {
            try await withIdentity { try await $0.register(appAccountToken: later, userIdentifier: "dana", appID: app.id) }
        }
        // A receipt posted with the token for its user registers it (the first mapping of a token stands).
        let posted = UUID()
        var withToken = record(user: "fay", transaction: "tok-\(UUID())")
        if case .receipt(var job) = withToken.envelope.payload {
            job.submission.appAccountToken = posted
            withToken.envelope.payload = .receipt(job)
        }
        try save(withToken)
        #expect(
            try column("SELECT user_identifier AS v FROM app_account_tokens WHERE app_id = \(app.id) AND app_account_token = \(posted)")
                == ["fay"])
    }

    @Test("A merge moves the alias's rows and lifts their conflict; chains resolve to one id; a cycle is refused; again is a no-op")
    func aliases() async throws {
        let contested = "al-\(UUID())"
        try save(record(user: "gus", transaction: contested))
        try save(record(user: "gus-phone", transaction: contested))
        let own = "al-\(UUID())"
        try save(record(user: "gus-phone", transaction: own, subscription: false))
        #expect(try owners(contested).conflict == true)

        let merge = try await withIdentity { try await $0.alias("gus-phone", userIdentifier: "gus", appID: app.id, at: Date()) }
        #expect(merge == AliasMerge(alias: "gus-phone", userIdentifier: "gus", movedPurchases: 1, created: true))
        #expect(try owners(own).purchase == "gus")
        #expect(try owners(contested) == ("gus", "gus", false))
        #expect(try events("customer.aliased", subject: "customer:gus") == ["gus"])
        // Presented by the alias afterwards: the customer's, no conflict.
        try save(record(user: "gus-phone", transaction: contested))
        #expect(try owners(contested) == ("gus", "gus", false))

        // gus merged into hal: gus's alias follows (one hop), and either name of the group answers hal.
        let into = try await withIdentity { try await $0.alias("gus-phone", userIdentifier: "hal", appID: app.id, at: Date()) }
        #expect(into.userIdentifier == "hal" && into.created)
        #expect(
            try column("SELECT alias || '→' || user_identifier AS v FROM user_aliases WHERE app_id = \(app.id) ORDER BY alias")
                == ["gus→hal", "gus-phone→hal"])
        #expect(try owners(own).purchase == "hal")
        await #expect(throws: CustomerIdentityError.aliasCycle) {
            try await withIdentity { try await $0.alias("hal", userIdentifier: "gus", appID: app.id, at: Date()) }
        }
        let again = try await withIdentity { try await $0.alias("gus", userIdentifier: "hal", appID: app.id, at: Date()) }
        #expect(again.created == false)
        // The dashboard's customer view of any id shows the whole customer.
        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        let view = try await PostgresCustomerDirectory(pool: pool).customer(CustomerQuery(appID: app.id, userIdentifier: "gus"))
        #expect(view.userIdentifiers == ["gus", "gus-phone", "hal"])
        #expect(Set(view.purchases.map(\.transactionID)) == [contested, own])
    }
}
