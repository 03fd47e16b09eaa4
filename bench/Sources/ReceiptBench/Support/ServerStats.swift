import Foundation
import Hiredis
import Libpq

/// Counters of the Redis server (`INFO`), sampled before and after a measured window.
struct RedisStats {
    /// Calls per command (`INFO commandstats`), e.g. `blmove`, `evalsha`, `exec`.
    var calls: [String: Double] = [:]
    /// CPU seconds of the server process (`used_cpu_user` + `used_cpu_sys`), children excluded.
    var cpuSeconds: Double = 0
    /// CPU seconds of its children (AOF rewrites).
    var childCPUSeconds: Double = 0
    var netInputBytes: Double = 0
    var netOutputBytes: Double = 0
    var forks: Double = 0
    var processID: Int32?

    static func sample(_ redis: RedisConnection) throws -> RedisStats {
        var stats = RedisStats()
        for section in ["commandstats", "cpu", "stats", "server"] {
            guard let text = try redis.send(["INFO", section]).string else { continue }
            for line in text.split(whereSeparator: \.isNewline) {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let key = String(line[..<colon])
                let value = line[line.index(after: colon)...]
                if key.hasPrefix("cmdstat_") {
                    // cmdstat_blmove:calls=123,usec=456,...
                    let name = String(key.dropFirst("cmdstat_".count))
                    if let calls = value.split(separator: ",").first(where: { $0.hasPrefix("calls=") }) {
                        stats.calls[name] = Double(calls.dropFirst("calls=".count)) ?? 0
                    }
                    continue
                }
                let number = Double(value) ?? 0
                switch key {
                case "used_cpu_user", "used_cpu_sys": stats.cpuSeconds += number
                case "used_cpu_user_children", "used_cpu_sys_children": stats.childCPUSeconds += number
                case "total_net_input_bytes": stats.netInputBytes = number
                case "total_net_output_bytes": stats.netOutputBytes = number
                case "total_forks": stats.forks = number
                case "process_id": stats.processID = Int32(value)
                default: break
                }
            }
        }
        return stats
    }

    /// Calls of each command between two samples.
    static func callDelta(_ before: RedisStats, _ after: RedisStats) -> [String: Double] {
        var delta: [String: Double] = [:]
        for (name, calls) in after.calls {
            let change = calls - (before.calls[name] ?? 0)
            if change > 0 { delta[name] = change }
        }
        return delta
    }
}

/// Counters of the Postgres database (`pg_stat_database`, `pg_stat_wal`) and the CPU of every
/// server process (the postmaster's family in `/proc`), sampled before and after a window.
struct PostgresStats {
    var values: [String: Double] = [:]
    /// CPU µs per server process, when the server runs on this machine.
    var family: [Int32: Double] = [:]

    static let databaseColumns = ["xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_fetched", "blks_read"]
    static let walColumns = ["wal_records", "wal_fpi", "wal_bytes", "wal_write", "wal_sync"]

    static func sample(_ connection: PostgresConnection, postmaster: Int32?) throws -> PostgresStats {
        var stats = PostgresStats()
        let database = try connection.query(
            PostgresQuery(
                unsafeSQL: "SELECT \(databaseColumns.joined(separator: ", ")) FROM pg_stat_database WHERE datname = current_database()")
        ).rows.first
        for column in databaseColumns { stats.values[column] = database?.double(column) ?? 0 }
        // pg_stat_wal exists from Postgres 14.
        if let wal = try? connection.query(PostgresQuery(unsafeSQL: "SELECT \(walColumns.joined(separator: ", ")) FROM pg_stat_wal")).rows
            .first
        {
            for column in walColumns { stats.values[column] = wal.double(column) ?? 0 }
        }
        // Index tuples read per index of the tables a job writes: shows a plan that walks an index
        // it should not (e.g. a query by primary key planned on another index).
        let indexes = try connection.query(
            """
            SELECT indexrelname AS name, idx_tup_read AS n FROM pg_stat_user_indexes
            WHERE relname IN ('receipts', 'in_app_purchases', 'validation_attempts', 'apps')
               OR relname LIKE 'validation\\_attempts\\_%' -- its partitions (migration 0032)
            """
        ).rows
        for index in indexes {
            if let name = index.string("name") { stats.values["idx_tup_read:\(name)"] = index.double("n") ?? 0 }
        }
        if let postmaster { stats.family = ProcessStats.familyCPU(parent: postmaster) }
        return stats
    }

    static func delta(_ before: PostgresStats, _ after: PostgresStats) -> [String: Double] {
        after.values.reduce(into: [:]) { result, entry in result[entry.key] = entry.value - (before.values[entry.key] ?? 0) }
    }

    /// The postmaster's pid, when the server runs on this machine: the parent of this session's backend.
    static func postmasterPID(_ connection: PostgresConnection) -> Int32? {
        guard let backend = (try? connection.query("SELECT pg_backend_pid() AS pid"))?.rows.first?.int("pid"),
            let parent = ProcessStats.parent(of: Int32(backend)), parent > 1
        else { return nil }
        return parent
    }
}
