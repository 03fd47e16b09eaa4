import Curl
import Foundation
import Hiredis
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import RedisJobQueue

// The pipeline row's machinery around its levels: finding the binary, checking durability, the
// mock, cleaning up, waiting for a quiet machine.
extension PipelineRow {
    /// Waits until the 1-minute load average is below `context.quietLoad` (at most
    /// `context.quietWait` seconds); returns how long it waited and whether the machine got quiet.
    static func waitForQuiet(_ context: Context, key: String) -> (waited: Double, quiet: Bool) {
        guard context.quietLoad > 0 else { return (0, true) }
        let started = Date()
        var announced = false
        while true {
            let load = Machine.loadAverage().first ?? 0
            if load < context.quietLoad { return (Date().timeIntervalSince(started), true) }
            let waited = Date().timeIntervalSince(started)
            if waited >= context.quietWait {
                FileHandle.standardError.write(
                    Data("\(context.label): \(key): load \(load) after \(Int(waited)) s; running anyway (recorded)\n".utf8))
                return (waited, false)
            }
            if !announced {
                FileHandle.standardError.write(
                    Data("\(context.label): \(key): waiting for the 1-minute load (\(load)) to fall below \(context.quietLoad)…\n".utf8))
                announced = true
            }
            sleep(5)
        }
    }

    // MARK: - Setup

    static func locateReceiptq(_ explicit: String?) throws -> URL {
        let url: URL
        if let explicit {
            url = URL(fileURLWithPath: explicit)
        } else {
            let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            url = me.deletingLastPathComponent().appendingPathComponent("receiptq")
        }
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw BenchFailure(
                description: "\(url.path) not found: swift build -c release --package-path bench --product receiptq (scripts/bench does it)")
        }
        return url
    }

    /// fsync and synchronous_commit as this session sees them; throws when fsync is off (unless allowed).
    static func checkDurability(_ postgres: PostgresConnection, allowFsyncOff: Bool) throws -> [String: Any] {
        func show(_ setting: String) throws -> String {
            try postgres.query(PostgresQuery(unsafeSQL: "SHOW \(setting)")).rows.first?[0] ?? "?"
        }
        let fsync = try show("fsync")
        let durability: [String: Any] = [
            "fsync": fsync, "synchronous_commit": try show("synchronous_commit"),
            "full_page_writes": try show("full_page_writes"), "wal_sync_method": try show("wal_sync_method"),
            "max_connections": Int(try show("max_connections")) ?? -1, "server_version": try show("server_version"),
            "worker_sessions": "PGOPTIONS=-c synchronous_commit=on",
        ]
        if fsync != "on" && !allowFsyncOff {
            throw BenchFailure(
                description: "Postgres has fsync = \(fsync) (started with RECEIPTQ_PG_FAST=1?): the pipeline must commit durably. "
                    + "Restart it with `scripts/services stop && scripts/services start`, or pass --allow-fsync-off")
        }
        return durability
    }

    static func startMock(_ context: Context) throws {
        let mock = try BenchMock(
            receiptq: context.receiptq, latencyMs: context.latencyMs,
            extraArguments: context.serverAPI.map { ["--jws-ca-directory", $0.jwsDirectory.path, "--synthesize-transactions"] } ?? [],
            bundleID: Context.bundleID, sharedSecret: Context.sharedSecret, logDirectory: context.logDirectory)
        context.mock = mock.process
        context.mockBase = mock.base
    }

    /// Removes the bench's rows (children first), so the database does not grow run after run.
    static func cleanup(_ context: Context) {
        BenchApps.delete(context.apps, on: context.postgres, row: "pipeline")
        context.apps = []
    }
}
