import Foundation
import Libpq
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The backup ops/postgres/README.md prescribes, taken and restored once: `pg_dump -Fc` of a
/// running system while receipts are still being posted, `pg_restore` into a new database, and a
/// second system started on the copy that answers what the first had acknowledged.
@Suite("Backups: pg_dump of a running system, restored and served", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct BackupRestoreTests {
    func environment(_ server: ThrowawayPostgres, database: String) -> [String: String] {
        ["POSTGRES_HOSTNAME": "127.0.0.1", "POSTGRES_PORT": String(server.port), "POSTGRES_USER": "receiptq", "POSTGRES_DB": database]
    }

    /// Posts one forged receipt of `system`'s app for `user`; its id.
    func post(_ system: TestSystem, user: String) async throws -> String? {
        let (receipt, _) = try system.forgeReceipt()
        let (status, body) = try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"\#(user)"}"#)
        guard [200, 206].contains(status) else { return nil }
        return body?["id"]?.stringValue
    }

    @Test("A dump taken while receipts are posted restores in one transaction; a system on the copy answers every receipt acknowledged before it")
    func dumpWhileWritingThenServeTheCopy() async throws {
        let server = try await offload { try ThrowawayPostgres() }
        defer { server.destroy() }
        try await offload { try server.createDatabase(user: "receiptq", database: "receiptq_live") }
        let system = try await TestSystem.start(environment: environment(server, database: "receiptq_live"))
        var ids: [String] = []
        do {
            for _ in 0..<20 { ids.append(try #require(try await post(system, user: "backup-user"))) }
            let validated = try await eventually(timeout: .seconds(60)) {
                var valid = 0
                for id in ids where try await system.get(id).1?["validation_status"]?.stringValue == "valid" { valid += 1 }
                return valid == ids.count
            }
            #expect(validated, "the first receipts are validated before the dump")

            // The dump runs while the API keeps taking receipts and the worker keeps writing.
            let writer = Task {
                var more = 0
                for _ in 0..<30 where (try? await post(system, user: "backup-later")) != nil { more += 1 }
                return more
            }
            let file = try await offload { try server.dump(database: "receiptq_live", named: "live") }
            #expect(await writer.value == 30)
            try await offload { try server.restore(file, into: "receiptq_restored", owner: "receiptq") }
        } catch {
            await system.stop()
            throw error
        }
        await system.stop()

        // A system on the copy: its migrations find nothing to do, and it answers the first
        // system's app (its token is in the copy) with what was stored before the dump.
        let live = try PostgresConnection(
            configuration: PostgresConfiguration(host: "127.0.0.1", port: server.port, user: "receiptq", database: "receiptq_live"))
        defer { live.close() }
        let copy = try PostgresConnection(
            configuration: PostgresConfiguration(host: "127.0.0.1", port: server.port, user: "receiptq", database: "receiptq_restored"))
        defer { copy.close() }
        let versions: PostgresQuery = "SELECT coalesce(max(version), 0) AS v, count(*) AS n FROM schema_migrations"
        let before = try await copy.query(versions).rows.first
        let restored = try await TestSystem.start(environment: environment(server, database: "receiptq_restored"))
        do {
            let after = try await copy.query(versions).rows.first
            #expect(after?.int("v") == before?.int("v") && after?.int("n") == before?.int("n"), "migrate is a no-op on the copy")
            for id in ids {
                let (status, body) = try await restored.get(id, token: system.token)
                #expect(status == 200 && body?["validation_status"]?.stringValue == "valid", "\(id): \(status)")
            }
            let (status, subscriptions) = try await restored.get(path: "/client/subscriptions?user_identifier=backup-user", token: system.token)
            #expect(status == 200 && subscriptions != nil)
        } catch {
            await restored.stop()
            throw error
        }
        await restored.stop()

        // Whole records only: the copy holds a subset of what the live database holds, and every
        // purchase and attempt in it has its receipt (pg_restore checked the foreign keys).
        let counts: PostgresQuery = "SELECT (SELECT count(*) FROM receipts) AS r, (SELECT count(*) FROM in_app_purchases) AS p"
        let copied = try await copy.query(counts).rows.first
        let kept = try await live.query(counts).rows.first
        #expect((copied?.int("r") ?? 0) >= ids.count && (copied?.int("r") ?? 0) <= (kept?.int("r") ?? 0))
        let orphans = try await copy.query(
            "SELECT count(*) AS n FROM in_app_purchases p WHERE NOT EXISTS (SELECT 1 FROM receipts r WHERE r.id = p.receipt_id)"
        ).rows.first?.int("n")
        #expect(orphans == 0)
    }
}
