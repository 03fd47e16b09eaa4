import Foundation
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Postgres failover under load: a primary and a streaming standby, receiptq given both
/// (`POSTGRES_HOSTNAME=a,b`, `target_session_attrs=read-write`), the primary crashed mid-run and
/// the standby promoted (`pg_ctl promote`, as Patroni and friends do).
@Suite("Postgres: a promoted standby is followed, nothing lost", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct PostgresFailoverTests {
    @Test(
        "600 receipts at 50/s; the primary crashes (immediate stop) and the synchronous standby is promoted: every 2xx ends validated once on the new primary"
    )
    func promotedStandby() async throws {
        let primary = try await offload { try ThrowawayPostgres() }
        defer { primary.destroy() }
        try await offload { try primary.createDatabase(user: "receiptq", database: "receiptq_failover") }
        let standby = try await offload { try ThrowawayPostgres(standbyOf: primary) }
        defer { standby.destroy() }
        // Synchronous replication: a commit returns once the standby has it, so the crash loses no
        // committed result (without it a failover may lose the last commits: see ops/postgres).
        // Set after the copy, so the promoted standby does not wait for a standby of its own.
        try await offload {
            try primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            try primary.execute("SELECT pg_reload_conf()")
        }
        // The standby first: until the failover libpq must pass over it (it takes no writes) to the
        // primary, which read-write does; after it, the standby is the one that takes writes.
        let system = try await TestSystem.start(environment: [
            "POSTGRES_HOSTNAME": "127.0.0.1,127.0.0.1", "POSTGRES_PORT": "\(standby.port),\(primary.port)", "POSTGRES_USER": "receiptq",
            "POSTGRES_DB": "receiptq_failover", "API_SYNC_WAIT_MS": "0",
        ])
        defer { Task { await system.stop() } }
        #expect(system.configuration.postgres.targetSessionAttributes == nil, "read-write by default with two hosts")

        let receipts = try (0..<600).map { _ in try system.forgeReceipt().0 }
        let load = try await SteadyLoad.post(
            receipts, perSecond: 50, to: system, users: "pf-",
            events: [
                200: {
                    try await offload {
                        try primary.stop(mode: "immediate")
                        try standby.promote()
                    }
                }
            ])
        let acknowledged = load.acknowledged
        // The API stores nothing in Postgres on the way in (a token it has not cached is looked up
        // there: a request during the switch may answer 503, and the client retries): nearly all
        // are acknowledged.
        #expect(acknowledged.count >= receipts.count * 9 / 10, "\(acknowledged.count) of \(receipts.count) answered 2xx")

        let pg = try PostgresConnection(
            configuration: PostgresConfiguration(host: "127.0.0.1", port: standby.port, user: "receiptq", database: "receiptq_failover"))
        defer { pg.close() }
        func stored() async throws -> [Int: Int] {
            let rows = try await pg.query(
                """
                SELECT substr(user_identifier, 4)::int AS n, count(*) AS copies FROM receipts
                WHERE app_id = \(system.app.id) AND status = 'valid' AND user_identifier LIKE 'pf-%' GROUP BY user_identifier
                """
            ).rows
            return Dictionary(uniqueKeysWithValues: rows.compactMap { row in row.int("n").map { ($0, row.int("copies") ?? 0) } })
        }
        let complete = try await eventually(timeout: .seconds(90)) { try await stored().count == acknowledged.count }
        let final = try await stored()
        #expect(complete, "\(acknowledged.count - final.count) acknowledged receipts not validated on the promoted standby")
        #expect(final.values.allSatisfy { $0 == 1 }, "each stored once")
        // Not vacuous: the crash came mid-run, and the rest was written to the promoted standby.
        #expect(try await pg.query("SELECT pg_is_in_recovery() AS standby").rows.first?.bool("standby") == false)
    }
}
