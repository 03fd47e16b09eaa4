import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import RedisJobQueue
import Synchronization

/// The `scheduler` row's data: a database of `size` subscriptions made inside Postgres.
extension SchedulerRow {

    /// Makes the app, the receipts and `size` subscriptions; returns the load's timings and sizes.
    static func loadData(_ size: Int, settings: Settings, connection: PostgresConnection) throws -> [String: Any] {
        let label = sizeLabel(size)
        let start = BenchClock.wall()
        let now = Date()
        let app = UUID()
        try connection.execute("SET maintenance_work_mem = '1GB'")
        _ = try connection.query(
            "INSERT INTO apps (id, name, bundle_id) VALUES (\(app)::uuid, \("bench-scheduler"), \("com.example.receiptq.bench"))")
        // Fake base64 of the wanted length: SHA-512s of the row number, repeated (encode() wraps lines: drop them).
        _ = try connection.query(
            """
            INSERT INTO receipts (id, app_id, style, bundle_id, environment, status, apple_status, receipt_data, created_at, validated_at)
            SELECT md5('bench-receipt-' || i)::uuid, \(app)::uuid, 'unified', 'com.example.receiptq.bench', 'Production', 'valid', 0,
                   left(repeat(replace(encode(sha512(('bench-receipt-' || i)::bytea), 'base64'), E'\\n', ''), \(settings.receiptChars / 88 + 1)::int),
                        \(settings.receiptChars)::int),
                   \(now)::timestamptz - interval '60 days', \(now)::timestamptz - interval '1 day'
            FROM generate_series(0, \(settings.receipts - 1)::int) i
            """)

        // Keys and indexes are built once after the load, from their own definitions: far faster than
        // maintaining three B-trees and checking two foreign keys row by row.
        let constraints = try connection.query(
            """
            SELECT conname, pg_get_constraintdef(oid) AS definition, contype FROM pg_constraint
            WHERE conrelid = 'subscriptions'::regclass AND contype IN ('p', 'u', 'f')
            ORDER BY contype DESC, conname
            """
        ).rows.compactMap { row -> (name: String, definition: String)? in
            guard let name = row.string("conname"), let definition = row.string("definition") else { return nil }
            return (name, definition)
        }
        let indexes = try connection.query(
            """
            SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'subscriptions'
              AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = 'subscriptions'::regclass)
            ORDER BY indexname
            """
        ).rows.compactMap { row -> (name: String, definition: String)? in
            guard let name = row.string("indexname"), let definition = row.string("indexdef") else { return nil }
            return (name, definition)
        }
        guard indexes.contains(where: { $0.name == "subscriptions_due_idx" }) else {
            throw BenchFailure(description: "the migrated schema has no subscriptions_due_idx")
        }
        for index in indexes { try connection.execute("DROP INDEX \(index.name)") }
        for constraint in constraints.reversed() { try connection.execute("ALTER TABLE subscriptions DROP CONSTRAINT \(constraint.name)") }

        let insertStart = BenchClock.wall()
        let dueShare = Double(settings.due) / Double(size)
        var first = 0
        while first < size {
            let last = min(size, first + loadChunk) - 1
            // u picks the kind (due, ended, later), v the time within it: both hashes of the row number,
            // so due rows land all over the heap, as in a table filled over months.
            _ = try connection.query(
                """
                INSERT INTO subscriptions (
                    app_id, environment, original_transaction_id, product_id, state, expires_at, purchased_at,
                    original_purchase_date, auto_renew_status, auto_renew_product_id, latest_transaction_id, receipt_id,
                    observed_at, next_poll_at, user_identifier)
                SELECT \(app)::uuid, 'Production', (100000000000000 + g)::text, product, p.state, p.expires_at,
                       p.expires_at - interval '30 days', p.expires_at - interval '200 days', p.state = 'active', product,
                       (200000000000000 + g)::text, md5('bench-receipt-' || (g % \(settings.receipts)::bigint))::uuid,
                       \(now)::timestamptz - interval '1 day', p.next_poll_at, 'bench-user-' || g
                FROM generate_series(\(first)::bigint, \(last)::bigint) g,
                     LATERAL (SELECT (hashint8(g) & 2147483647)::float8 / 2147483648 AS u,
                                     (hashint8(g # 6148914691236517205) & 2147483647)::float8 / 2147483648 AS v,
                                     'com.example.receiptq.bench.' || (ARRAY['monthly', 'yearly', 'weekly'])[1 + g % 3] AS product) h,
                     LATERAL (SELECT CASE WHEN h.u < \(dueShare)::float8 THEN \(now)::timestamptz - h.v * interval '7 days'
                                          WHEN h.u < \(dueShare + endedShare)::float8 THEN NULL
                                          ELSE \(now)::timestamptz + h.v * interval '30 days' END AS next_poll_at,
                                     CASE WHEN h.u < \(dueShare)::float8 OR h.u >= \(dueShare + endedShare)::float8 THEN 'active' ELSE 'expired' END AS state) q,
                     LATERAL (SELECT q.state, q.next_poll_at,
                                     COALESCE(q.next_poll_at + interval '1 day', \(now)::timestamptz - h.v * interval '365 days') AS expires_at) p
                """)
            first = last + 1
            let elapsed = Double(BenchClock.wall() &- insertStart) / 1e9
            FileHandle.standardError.write(
                Data("scheduler: \(label): \(first) of \(size) subscriptions inserted (\(String(format: "%.0f", elapsed)) s)\n".utf8))
        }
        let insertSeconds = Double(BenchClock.wall() &- insertStart) / 1e9

        let indexStart = BenchClock.wall()
        for constraint in constraints {
            try connection.execute("ALTER TABLE subscriptions ADD CONSTRAINT \(constraint.name) \(constraint.definition)")
        }
        for index in indexes { try connection.execute(index.definition) }
        let indexSeconds = Double(BenchClock.wall() &- indexStart) / 1e9
        FileHandle.standardError.write(
            Data("scheduler: \(label): keys and indexes rebuilt (\(String(format: "%.0f", indexSeconds)) s); VACUUM ANALYZE…\n".utf8))

        let vacuumStart = BenchClock.wall()
        try connection.execute("VACUUM (ANALYZE) apps")
        try connection.execute("VACUUM (ANALYZE) receipts")
        try connection.execute("VACUUM (ANALYZE) subscriptions")
        try connection.execute("CHECKPOINT")
        let vacuumSeconds = Double(BenchClock.wall() &- vacuumStart) / 1e9
        let loadSeconds = Double(BenchClock.wall() &- start) / 1e9

        let counts = try connection.query(
            """
            SELECT count(*) AS total, count(*) FILTER (WHERE next_poll_at <= \(now)::timestamptz) AS due,
                   count(*) FILTER (WHERE next_poll_at IS NULL) AS ended
            FROM subscriptions
            """
        ).rows.first
        let relations = try connection.query(
            """
            SELECT c.relname AS name, pg_relation_size(c.oid)::float8 AS bytes FROM pg_class c
            WHERE c.oid = 'subscriptions'::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'subscriptions'::regclass)
            ORDER BY c.relname
            """
        ).rows
        let totals = try connection.query(
            """
            SELECT pg_total_relation_size('subscriptions')::float8 AS total, pg_indexes_size('subscriptions')::float8 AS indexes,
                   pg_total_relation_size('receipts')::float8 AS receipts, pg_database_size(current_database())::float8 AS database
            """
        ).rows.first
        var sizes: [String: Any] = [
            "subscriptions_total_bytes": totals?.double("total") ?? -1, "subscriptions_indexes_bytes": totals?.double("indexes") ?? -1,
            "receipts_total_bytes": totals?.double("receipts") ?? -1, "database_bytes": totals?.double("database") ?? -1,
        ]
        for relation in relations {
            if let name = relation.string("name") { sizes["\(name)_bytes"] = relation.double("bytes") ?? -1 }
        }
        guard let total = counts?.int("total"), total == size, let due = counts?.int("due"), let ended = counts?.int("ended") else {
            throw BenchFailure(description: "the load made \(counts?.int("total") ?? -1) subscriptions, not \(size)")
        }
        return [
            "due": due, "ended": ended,
            "load_s": Format.json(loadSeconds, places: 10), "insert_s": Format.json(insertSeconds, places: 10),
            "keys_indexes_s": Format.json(indexSeconds, places: 10), "vacuum_analyze_checkpoint_s": Format.json(vacuumSeconds, places: 10),
            "sizes": sizes,
        ]
    }
}
