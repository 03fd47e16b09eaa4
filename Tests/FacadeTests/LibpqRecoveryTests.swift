import Foundation
import ReceiptTesting
import Synchronization
import SystemTesting
import Testing

@testable import Libpq

/// Connections the server ended (a restart, `pg_terminate_backend`) are replaced, and work the
/// caller says may run twice is run once more when its connection drops under it.
@Suite("Libpq: dead connections replaced", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct LibpqRecoveryTests {
    let configuration = PostgresConfiguration(
        host: TestEnvironment.postgresHost,
        port: TestEnvironment.postgresPort,
        user: TestEnvironment.postgresUser,
        password: TestEnvironment.postgresPassword,
        database: TestEnvironment.postgresDatabase
    )

    /// Ends backend `pid` from another session and waits until its process has exited, which
    /// closes its socket. (The server stops listing it in `pg_stat_activity` earlier, while the
    /// process is still on its way out: on a loaded CI run the next statement then met the socket
    /// still open and failed.)
    func terminate(_ pid: Int) async throws {
        let admin = try PostgresConnection(configuration: configuration, label: "recovery-admin")
        defer { admin.close() }
        #expect(try await admin.query("SELECT pg_terminate_backend(\(pid)) AS ok").rows.first?.bool("ok") == true)
        let gone = try await eventually(timeout: .seconds(20)) {
            try await admin.query("SELECT count(*) AS n FROM pg_stat_activity WHERE pid = \(pid)").rows.first?.int("n") == 0
                && Self.exited(pid)
        }
        #expect(gone, "backend \(pid) ended")
    }

    /// Whether process `pid` (a backend of the tests' local server) has exited: gone from /proc,
    /// or a zombie waiting for the postmaster (its sockets are closed either way).
    static func exited(_ pid: Int) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return true }
        return status.split(separator: "\n").contains { $0.hasPrefix("State:") && $0.contains("Z") }
    }

    @Test("A connection whose session the server ended while it was idle reconnects before the next statement: no call fails")
    func idleSessionEndedIsReplacedBeforeTheNextCall() async throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let pid = try #require(try await db.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid"))
        try await terminate(pid)

        // Not a read (it creates a temporary table): it could not safely run twice, and it need not.
        try db.execute("CREATE TEMPORARY TABLE once (v int)")
        let row = try #require(try await db.query("SELECT pg_backend_pid() AS pid, current_setting('TimeZone') AS zone").rows.first)
        #expect(row.int("pid") != pid)
        #expect(row["zone"] == "UTC", "the new session is set up like the first")
    }

    @Test("A pooled connection the server ended while idle is replaced when lent: work that may run only once succeeds")
    func poolReplacesASessionEndedWhileIdle() async throws {
        let pool = PostgresConnectionPool(configuration: configuration, size: 1)
        defer { pool.close() }
        let pid = try #require(try await pool.withConnection { try $0.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid") })
        try await terminate(pid)

        let runs = Atomic(0)
        let after = try await pool.withConnection { db in
            runs.add(1, ordering: .relaxed)
            return try db.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid")
        }
        #expect(after != nil && after != pid)
        #expect(runs.load(ordering: .relaxed) == 1)
    }

    @Test("A connection dropped under a read-only call: the pool runs it once more on a fresh session")
    func poolRunsARepeatableCallAgain() async throws {
        let pool = PostgresConnectionPool(configuration: configuration, size: 1)
        defer { pool.close() }
        let runs = Atomic(0)
        let pids = Mutex<[Int]>([])
        let answer = try await pool.withConnection(.readOnly) { db in
            let run = runs.add(1, ordering: .relaxed).newValue
            let pid = try db.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid") ?? 0
            pids.withLock { $0.append(pid) }
            // The first run's session ends under it, between the pool's check and the statement.
            if run == 1 { try db.query("SELECT pg_terminate_backend(pg_backend_pid())") }
            return try db.query("SELECT 42 AS answer").rows.first?.int("answer")
        }
        #expect(answer == 42)
        #expect(runs.load(ordering: .relaxed) == 2)
        let seen = pids.withLock { $0 }
        #expect(seen.count == 2 && seen[0] != seen[1], "the second run had a session of its own: \(seen)")
    }

    @Test("A connection dropped under work that may run only once: the error reaches the caller, and the work ran once")
    func poolDoesNotRepeatOnceOnlyWork() async throws {
        let pool = PostgresConnectionPool(configuration: configuration, size: 1)
        defer { pool.close() }
        let runs = Atomic(0)
        let error = await #expect(throws: PostgresError.self) {
            try await pool.withConnection { db in
                runs.add(1, ordering: .relaxed)
                try db.query("SELECT pg_terminate_backend(pg_backend_pid())")
            }
        }
        #expect(error?.code == .connectionLost)
        #expect(runs.load(ordering: .relaxed) == 1)
        // The next borrower gets a working connection.
        #expect(try await pool.withConnection { try $0.query("SELECT 1 AS one").rows.first?.int("one") } == 1)
    }

    @Test("A server that cannot be reached is not tried twice: the connect failure reaches the caller at once")
    func unreachableServerIsNotRetried() async throws {
        var unreachable = configuration
        unreachable.port = try freeLoopbackPort()
        let pool = PostgresConnectionPool(configuration: unreachable, size: 1)
        defer { pool.close() }
        let runs = Atomic(0)
        let error = await #expect(throws: PostgresError.self) {
            try await pool.withConnection(.readOnly) { db in
                runs.add(1, ordering: .relaxed)
                return try db.query("SELECT 1 AS one").rows.count
            }
        }
        #expect(error?.code == .connectionFailed)
        #expect(runs.load(ordering: .relaxed) == 1)
        #expect(await pool.ping() == false)
    }

    @Test("The pool's ping answers on a connection of its own, even while every pooled connection is lent")
    func pingWhileThePoolIsBusy() async throws {
        let pool = PostgresConnectionPool(configuration: configuration, size: 1)
        defer { pool.close() }
        let lent = DispatchSemaphore(value: 0)
        let giveBack = DispatchSemaphore(value: 0)
        // The pool's one connection, kept by a body on the connection's own queue (as a long
        // statement keeps it) until told.
        let lender = Task {
            try await pool.withConnection { _ in
                lent.signal()
                giveBack.wait()
            }
        }
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                lent.wait()
                continuation.resume()
            }
        }
        #expect(await pool.ping())
        giveBack.signal()
        try await lender.value
    }
}
