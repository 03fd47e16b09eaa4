import Foundation
import Hiredis
import Libpq
import ReceiptTesting
import Synchronization
import SystemTesting

#if canImport(Glibc)
import Glibc
#endif

// Throwaway servers and the process helpers behind them: a `redis-server` (or sentinel) or a
// Postgres cluster of one test, on a free loopback port in a temp dir, for the suites that
// restart, kill or fail over their servers (the shared ones are never touched).

public struct RestartTestError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Runs blocking work (process launches, waits) off the cooperative pool, which has as many
/// threads as cores: two here.
public func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    // A thread of its own: the cooperative pool and libdispatch's global queues are each only as
    // wide as the machine (2 here), and a blocking wait on either stalls every other test's work.
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

// MARK: - Throwaway servers

/// Starts `arguments` (looked up on PATH) in `/`, stdin from /dev/null, stdout and stderr appended
/// to `log` (or /dev/null), and no other descriptor of ours.
///
/// Not Foundation's `Process`: on Linux it learns that a child exited from EOF on a socket the child
/// inherits, so a daemon the child leaves behind (the postmaster of `pg_ctl start`) keeps
/// `waitUntilExit()` waiting for ever; and every descriptor of the test (Redis and Postgres
/// connections, listening sockets) would live on in the servers.
public func spawn(_ arguments: [String], log: String? = nil) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, log ?? "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0o644)
    posix_spawn_file_actions_adddup2(&actions, 1, 2)
    guard let spawnCloseFrom, let spawnChangeDirectory else { throw RestartTestError("glibc ≥ 2.34 needed (posix_spawn closefrom)") }
    guard spawnCloseFrom(&actions, 3) == 0, spawnChangeDirectory(&actions, "/") == 0 else {
        throw RestartTestError("posix_spawn file actions failed")
    }
    return try spawnChild(arguments, environment: nil, actions: &actions)
}

/// Waits for a child started by `spawn`; nil when `timeout` passed first (it then still runs).
/// - Returns: its exit status, or 128 + the signal that ended it.
public func waitForChild(_ pid: pid_t, timeout: TimeInterval? = nil) -> Int32? {
    var status: Int32 = 0
    var failed = false
    /// One `waitpid`: whether the child is reaped (or cannot be waited for).
    func reaped(blocking: Bool) -> Bool {
        while true {
            let result = waitpid(pid, &status, blocking ? 0 : WNOHANG)
            if result == pid { return true }
            if result < 0, errno == EINTR { continue }
            if result < 0 { failed = true }
            return result < 0
        }
    }
    if let timeout {
        // Synchronous callers (a server's set-up and tear-down), so the blocking poll.
        guard eventuallyBlocking(timeout: .seconds(timeout), interval: .milliseconds(20), { reaped(blocking: false) }) else { return nil }
    } else {
        _ = reaped(blocking: true)
    }
    if failed { return -1 }
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
}

/// Runs a command to completion, stdout and stderr appended to `log`.
/// - Returns: its exit status.
@discardableResult
public func runCommand(_ arguments: [String], log: URL?) throws -> Int32 {
    let pid = try spawn(arguments, log: log?.path)
    return waitForChild(pid) ?? -1
}

/// True when `pid` is a live process (not a zombie: the slow PID 1 here may not have reaped it).
public func processIsAlive(_ pid: Int32) -> Bool {
    guard pid > 0, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let end = stat.range(of: ") ", options: .backwards)
    else { return false }
    let state = stat[end.upperBound...].first
    return state != "Z" && state != "X"
}

/// The last lines of a log, for a failure message.
public func tail(_ url: URL, lines: Int = 20) -> String {
    guard let text = try? String(contentsOf: url, encoding: .utf8) else { return "(no log at \(url.path))" }
    return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
}

/// A `redis-server` of this test alone: its own port and temp dir, AOF on (fsync every second),
/// no RDB snapshots. `destroy()` kills it and deletes its data; call it in a `defer`.
public final class ThrowawayRedis: @unchecked Sendable {
    /// Set once, in `init`.
    public private(set) var port = 0
    public let directory: URL
    private let lock = NSLock()
    // Guarded by `lock`.
    private var pid: pid_t?
    /// More `redis-server` arguments (e.g. `--replicaof`).
    private let extraArguments: [String]
    /// A sentinel's `sentinel.conf` lines (its `port` and `dir` added): the server runs as a sentinel.
    private let sentinelConfiguration: [String]?

    /// - Parameters:
    ///   - extraArguments: more `redis-server` arguments, e.g. `["--replicaof", "127.0.0.1", "6379"]`.
    ///   - sentinelConfiguration: `sentinel …` lines: start a Redis Sentinel with them instead.
    public init(extraArguments: [String] = [], sentinelConfiguration: [String]? = nil) throws {
        self.extraArguments = extraArguments
        self.sentinelConfiguration = sentinelConfiguration
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("receiptq-redis-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var lastError: (any Error)?
        for _ in 0..<3 {
            // A port taken between picking and binding: pick again.
            do {
                port = try freeLoopbackPort()
                try start()
                return
            } catch {
                lastError = error
            }
        }
        try? FileManager.default.removeItem(at: directory)
        throw lastError ?? RestartTestError("redis-server did not start")
    }

    deinit { destroy() }

    private var log: URL { directory.appendingPathComponent("redis.log") }

    /// The lines of the server's log that contain any of `markers` (all lines for none), for a
    /// failure message; empty once destroyed.
    public func logLines(containing markers: [String] = []) -> [String] {
        let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init).filter { line in markers.isEmpty || markers.contains { line.contains($0) } }
    }

    /// Starts the server (on the same port and dir as before) and waits until it answers PING,
    /// which it does only once the AOF is loaded.
    public func start() throws {
        var arguments = [
            "redis-server", "--port", String(port), "--bind", "127.0.0.1", "--dir", directory.path, "--appendonly", "yes",
            "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--logfile", log.path,
            // A replica's first sync starts at once, not after the default 5 s wait for others.
            "--repl-diskless-sync-delay", "0",
        ]
        if let sentinelConfiguration {
            // A sentinel rewrites its configuration file (what it learnt of replicas and peers).
            let file = directory.appendingPathComponent("sentinel.conf")
            let lines = [
                "port \(port)", "bind 127.0.0.1", "daemonize no", "dir \(directory.path)", "logfile \(log.path)",
            ]
            try (lines + sentinelConfiguration).joined(separator: "\n").appending("\n").write(to: file, atomically: true, encoding: .utf8)
            arguments = ["redis-server", file.path, "--sentinel"]
        }
        let pid = try spawn(arguments + extraArguments)
        lock.withLock { self.pid = pid }
        let connection = RedisConfiguration(host: "127.0.0.1", port: port, connectTimeout: .milliseconds(500), commandTimeout: .seconds(2))
        // Synchronous (`init` starts it), so the blocking poll.
        let up = try eventuallyBlocking(timeout: .seconds(15)) {
            if waitForChild(pid, timeout: 0) != nil {
                lock.withLock { self.pid = nil }
                throw RestartTestError("redis-server exited: \(tail(log))")
            }
            guard let redis = try? RedisConnection(configuration: connection, label: "throwaway-ping") else { return false }
            defer { redis.close() }
            do {
                return try redis.send(["PING"]).string == "PONG"
            } catch let error as RedisError where error.message.hasPrefix("NOAUTH") {
                return true  // up, and wanting a password (requirepass)
            } catch {
                return false
            }
        }
        if up { return }
        throw RestartTestError("redis-server on port \(port) not ready: \(tail(log))")
    }

    /// BGREWRITEAOF, waiting until it completed: everything written before is then on disk
    /// (the rewrite fsyncs the new AOF before it replaces the old one).
    public func rewriteAppendOnlyFile() throws {
        let redis = try RedisConnection(configuration: RedisConfiguration(host: "127.0.0.1", port: port), label: "throwaway-admin")
        defer { redis.close() }
        func persistence() throws -> [String: String] {
            let info = try redis.send(["INFO", "persistence"]).string ?? ""
            return Dictionary(
                info.split(whereSeparator: \.isNewline).compactMap { line in
                    let parts = line.split(separator: ":", maxSplits: 1)
                    return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
                }, uniquingKeysWith: { $1 })
        }
        let before = try persistence()["aof_rewrites"] ?? ""
        _ = try redis.send(["BGREWRITEAOF"])
        // Synchronous like the rest of the server's controls (called inside `offload`).
        let done = try eventuallyBlocking(timeout: .seconds(15)) {
            let state = try persistence()
            return state["aof_rewrites"] != before && state["aof_rewrite_in_progress"] == "0" && state["aof_rewrite_scheduled"] == "0"
        }
        if done {
            guard try persistence()["aof_last_bgrewrite_status"] == "ok" else { throw RestartTestError("AOF rewrite failed: \(tail(log))") }
            return
        }
        throw RestartTestError("AOF rewrite did not finish: \(tail(log))")
    }

    /// `redis-cli shutdown`: Redis flushes and fsyncs its AOF, then exits.
    public func shutdown() throws {
        try runCommand(["redis-cli", "-h", "127.0.0.1", "-p", String(port), "shutdown"], log: nil)
        try waitForExit()
    }

    /// SIGKILL: a crash, the AOF is whatever reached the file.
    public func kill() throws {
        guard let pid = lock.withLock({ self.pid }) else { return }
        Glibc.kill(pid, SIGKILL)
        try waitForExit()
    }

    private func waitForExit() throws {
        guard let pid = lock.withLock({ self.pid }) else { return }
        guard waitForChild(pid, timeout: 15) != nil else { throw RestartTestError("redis-server did not exit") }
        lock.withLock { self.pid = nil }
    }

    /// Sends `signal` to the server (SIGSTOP: a network partition as its peers see it; SIGCONT: back).
    public func signal(_ signal: Int32) {
        guard let pid = lock.withLock({ self.pid }) else { return }
        Glibc.kill(pid, signal)
    }

    /// Kills the server if it runs and deletes its data. Idempotent.
    public func destroy() {
        if let pid = lock.withLock({ () -> pid_t? in
            defer { self.pid = nil }
            return self.pid
        }) {
            Glibc.kill(pid, SIGKILL)
            _ = waitForChild(pid)
        }
        try? FileManager.default.removeItem(at: directory)
    }
}

/// A Postgres cluster of this test alone, in a temp dir, on its own loopback port (no Unix socket),
/// trust auth on 127.0.0.1, fsync off (a process crash loses nothing with fsync off; only a machine
/// crash would). As root it runs as the `postgres` user (Postgres refuses root), like
/// `scripts/services`. `destroy()` stops it and deletes the cluster; call it in a `defer`.
public final class ThrowawayPostgres: @unchecked Sendable {
    /// Set once, in `init`.
    public private(set) var port = 0
    public let directory: URL
    private let bin: String
    private let asServerUser: [String]
    private var data: String { directory.appendingPathComponent("data").path }
    private var log: URL { directory.appendingPathComponent("postgres.log") }
    private var commandLog: URL { directory.appendingPathComponent("commands.log") }

    /// Whether this cluster began as a copy of another (a streaming standby).
    private let isStandby: Bool

    /// A new cluster, or (`standbyOf`) a streaming standby of a running one, copied with
    /// `pg_basebackup -R`: it follows the primary until ``promote()``.
    public init(standbyOf primary: ThrowawayPostgres? = nil) throws {
        isStandby = primary != nil
        bin = try Self.findBin()
        let isRoot = geteuid() == 0
        asServerUser = isRoot ? ["runuser", "-u", "postgres", "--"] : []
        // mkdtemp: private to us, then handed to the server's user.
        var template = Array("/tmp/receiptq-pg-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw RestartTestError("mkdtemp: errno \(errno)")
        }
        directory = URL(fileURLWithPath: String(cString: made))
        do {
            if isRoot {
                guard let user = getpwnam("postgres") else { throw RestartTestError("no 'postgres' system user (scripts/setup)") }
                guard chown(directory.path, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
                    throw RestartTestError("chown: errno \(errno)")
                }
            }
            let status = try runCommand(
                asServerUser
                    + (primary.map { primary in
                        [
                            "\(bin)/pg_basebackup", "-d", "host=127.0.0.1 port=\(primary.port) user=postgres", "-D", data, "-R", "-X", "stream", "-c",
                            "fast",
                            "--no-sync",
                        ]
                    }
                        ?? [
                            "\(bin)/initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync",
                        ]),
                log: directory.appendingPathComponent("initdb.log"))
            guard status == 0 else {
                throw RestartTestError(
                    "\(primary == nil ? "initdb" : "pg_basebackup") failed: \(tail(directory.appendingPathComponent("initdb.log")))")
            }
            var lastError: (any Error)?
            for _ in 0..<3 {
                do {
                    port = try freeLoopbackPort()
                    try configure()
                    try start()
                    return
                } catch {
                    lastError = error
                }
            }
            throw lastError ?? RestartTestError("postgres did not start")
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    deinit { destroy() }

    /// The newest server binaries Debian installed (off PATH, one dir per major version).
    private static func findBin() throws -> String {
        let base = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []
        guard
            let best = versions.compactMap(Int.init).sorted().last(where: {
                FileManager.default.isExecutableFile(atPath: "\(base)/\($0)/bin/pg_ctl")
            })
        else { throw RestartTestError("no Postgres server binaries in \(base)/*/bin (scripts/setup)") }
        return "\(base)/\(best)/bin"
    }

    /// Written as the server's user, so it stays the owner of its files.
    private func configure() throws {
        let settings = """
            listen_addresses = '127.0.0.1'
            port = \(port)
            unix_socket_directories = ''
            max_connections = 100
            fsync = off
            full_page_writes = off
            """
        // A standby's copy already holds the primary's settings and, from `-R`, how to reach it:
        // appended, the later lines win.
        let status = try runCommand(
            asServerUser + [
                "sh", "-c", "printf '%s\\n' \"$1\" \(isStandby ? ">>" : ">") \"$2\"", "sh", settings, "\(data)/postgresql.auto.conf",
            ], log: commandLog)
        guard status == 0 else { throw RestartTestError("could not write postgresql.auto.conf: \(tail(commandLog))") }
    }

    /// Starts the server and waits until it accepts connections (crash recovery included).
    public func start() throws {
        // An immediate stop can leave a postmaster.pid whose process is a zombie, which Postgres
        // (kill(pid, 0)) would take for a running server.
        let pidFile = "\(data)/postmaster.pid"
        if let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
            let pid = text.split(separator: "\n").first.flatMap({ Int32($0) }), !processIsAlive(pid)
        {
            try? FileManager.default.removeItem(atPath: pidFile)
        }
        let status = try runCommand(asServerUser + ["\(bin)/pg_ctl", "-D", data, "-l", log.path, "-w", "-t", "30", "start"], log: commandLog)
        // A full CI run once had pg_ctl print "done" and still report a failure: what counts is
        // whether the server runs, which `pg_ctl status` says.
        let running = try status == 0 || runCommand(asServerUser + ["\(bin)/pg_ctl", "-D", data, "status"], log: commandLog) == 0
        guard running else {
            throw RestartTestError("pg_ctl start failed (status \(status)): \(tail(commandLog))\n\(tail(log))")
        }
    }

    /// `pg_ctl stop -m <mode>`: `fast` rolls back and disconnects every session, then checkpoints;
    /// `immediate` kills the server processes without a checkpoint (a crash: the next start
    /// replays the WAL).
    public func stop(mode: String) throws {
        let status = try runCommand(asServerUser + ["\(bin)/pg_ctl", "-D", data, "-m", mode, "-w", "-t", "30", "stop"], log: commandLog)
        guard status == 0 else { throw RestartTestError("pg_ctl stop -m \(mode) failed: \(tail(commandLog))") }
    }

    /// `pg_ctl promote`: a standby stops following and takes writes (what Patroni does in a failover).
    public func promote() throws {
        let status = try runCommand(asServerUser + ["\(bin)/pg_ctl", "-D", data, "-w", "-t", "30", "promote"], log: commandLog)
        guard status == 0 else { throw RestartTestError("pg_ctl promote failed: \(tail(commandLog))\n\(tail(log))") }
    }

    /// Runs `statement` as the superuser on this server.
    public func execute(_ statement: String) throws {
        let admin = try PostgresConnection(
            configuration: PostgresConfiguration(host: "127.0.0.1", port: port, user: "postgres", database: "postgres"), label: "throwaway-admin")
        defer { admin.close() }
        try admin.execute(statement)
    }

    /// A login role (superuser, as `scripts/services` makes it) and its database.
    public func createDatabase(user: String, database: String) throws {
        let admin = try PostgresConnection(
            configuration: PostgresConfiguration(host: "127.0.0.1", port: port, user: "postgres", database: "postgres"), label: "throwaway-admin")
        defer { admin.close() }
        try admin.execute("CREATE ROLE \(user) LOGIN SUPERUSER")
        try admin.execute("CREATE DATABASE \(database) OWNER \(user)")
    }

    /// `pg_dump -Fc` of `database` while it runs (one snapshot: what had committed when the dump
    /// began), as ops/postgres/README.md tells operators to take it; returns the dump's file.
    public func dump(database: String, named name: String) throws -> URL {
        let file = directory.appendingPathComponent("\(name).dump")
        let status = try runCommand(
            asServerUser + ["\(bin)/pg_dump", "-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-Fc", "-f", file.path, database],
            log: commandLog)
        guard status == 0 else { throw RestartTestError("pg_dump failed: \(tail(commandLog))") }
        return file
    }

    /// `pg_restore` of a ``dump(database:named:)`` into a new `database` owned by `owner`, in one
    /// transaction (a restore that fails leaves nothing half-done).
    public func restore(_ file: URL, into database: String, owner: String) throws {
        try execute("CREATE DATABASE \(database) OWNER \(owner)")
        let status = try runCommand(
            asServerUser + [
                "\(bin)/pg_restore", "-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "--single-transaction", "--exit-on-error",
                "--no-owner", "--role", owner, "-d", database, file.path,
            ], log: commandLog)
        guard status == 0 else { throw RestartTestError("pg_restore failed: \(tail(commandLog))") }
    }

    /// Stops the server if it runs (immediate: it is thrown away) and deletes the cluster. Idempotent.
    public func destroy() {
        if FileManager.default.fileExists(atPath: "\(data)/postmaster.pid") {
            _ = try? runCommand(asServerUser + ["\(bin)/pg_ctl", "-D", data, "-m", "immediate", "-w", "-t", "30", "stop"], log: nil)
        }
        try? FileManager.default.removeItem(at: directory)
    }
}
