import Foundation
import Hiredis
import Logging
import ReceiptTesting
import Synchronization
import SystemTesting
import Testing

/// The hiredis façade against a real Redis (`REDIS_HOSTNAME`/`REDIS_PORT`).
///
/// Every test uses keys under its own random prefix and deletes them; nothing flushes the database.
@Suite("Hiredis façade", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct HiredisTests {
    let configuration = RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)
    /// For a pool whose connection waits in `BLPOP` for a push the test makes when its task next
    /// runs: in the crowded start of the full run that has taken over 10 s, the default read timeout.
    var patientConfiguration: RedisConfiguration {
        var patient = configuration
        patient.commandTimeout = .seconds(130)
        return patient
    }

    /// A key unique to this test run, so parallel tests and re-runs never share state.
    func key(_ name: String = "k", function: String = #function) -> String {
        "receiptq-test:\(function):\(UUID().uuidString):\(name)"
    }

    @Test func connectsAndPings() throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        #expect(try redis.send(["PING"]) == .status("PONG"))
        #expect(try redis.send(["ECHO", "hello"]).string == "hello")
    }

    @Test func setAndGetAreBinarySafe() throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        let bytesKey = key("bytes")
        let textKey = key("text")
        defer { _ = try? redis.send(["DEL", bytesKey, textKey]) }

        let payload: [UInt8] = [0x00, 0x01, 0x0D, 0x0A, 0x24, 0x2A, 0xFF, 0x00, 0x0D, 0x0A]
        #expect(try redis.send(bytes: [Array("SET".utf8), Array(bytesKey.utf8), payload]) == .status("OK"))
        let stored = try redis.send(["GET", bytesKey])
        #expect(stored == .bulk(payload))
        #expect(stored.string == nil, "0xFF is not UTF-8, so string must not repair it")
        #expect(try redis.send(["STRLEN", bytesKey]) == .integer(payload.count))

        let text = "reçu ✓ 🧾\r\n*1\r\n$4\r\nPING\r\n\0tail"
        #expect(try redis.send(["SET", textKey, text]) == .status("OK"))
        #expect(try redis.send(["GET", textKey]).string == text)
        #expect(try redis.send(["STRLEN", textKey]).int == text.utf8.count)
        // The embedded protocol fragment was data, not a second command.
        #expect(try redis.send(["PING"]) == .status("PONG"))
    }

    @Test func integerArrayAndNullReplies() throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        let counter = key("counter")
        let list = key("list")
        let missing = key("missing")
        defer { _ = try? redis.send(["DEL", counter, list]) }

        #expect(try redis.send(["INCRBY", counter, "41"]) == .integer(41))
        #expect(try redis.send(["INCR", counter]).int == 42)
        #expect(try redis.send(["GET", counter]).int == 42)
        #expect(try redis.send(["DECRBY", counter, "100"]) == .integer(-58))

        #expect(try redis.send(["RPUSH", list, "a", "", "c"]) == .integer(3))
        let range = try redis.send(["LRANGE", list, "0", "-1"])
        #expect(range == .array([.bulk(Array("a".utf8)), .bulk([]), .bulk(Array("c".utf8))]))
        #expect(range.array?.compactMap(\.string) == ["a", "", "c"])
        #expect(try redis.send(["LRANGE", missing, "0", "-1"]) == .array([]))

        let nothing = try redis.send(["GET", missing])
        #expect(nothing == .null)
        #expect(nothing.isNull)
        #expect(nothing.string == nil)
        // Nested arrays with a nil element inside.
        let mixed = try redis.send(["EVAL", "return {1, {'x', false}, 'y'}", "0"])
        #expect(mixed == .array([.integer(1), .array([.bulk(Array("x".utf8)), .null]), .bulk(Array("y".utf8))]))
    }

    @Test func errorReplyThrowsServerError() throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        let text = key("text")
        defer { _ = try? redis.send(["DEL", text]) }
        _ = try redis.send(["SET", text, "not a number"])

        let error = try #require(throws: RedisError.self) { try redis.send(["INCR", text]) }
        #expect(error.code == .server)
        #expect(error.code.description == "server")
        #expect(error.message.contains("not an integer"))
        _ = try redis.send(["RPUSH", key("other"), "x"])
        #expect(throws: RedisError.server) { try redis.send(["LPUSH", text, "x"]) }  // WRONGTYPE
        // The connection stays usable after an error reply.
        #expect(try redis.send(["PING"]) == .status("PONG"))
    }

    @Test func errorMessagesNeverEchoArguments() throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        let secret = "s3cr3t-receipt-data-\(UUID().uuidString)"
        let error = try #require(throws: RedisError.self) { try redis.send(["NOSUCHCOMMAND", secret, "x"]) }
        #expect(error.code == .server)
        #expect(error.message.contains("unknown command"))
        #expect(!String(describing: error).contains(secret))
        #expect(!String(describing: error).contains("s3cr3t"))

        let short = try #require(throws: RedisError.self) { try redis.send(["CONFIG", "NOPE"]) }
        #expect(!short.message.contains("'NOPE'"))
    }

    @Test func pipelinesAThousandCommands() throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        let counter = key("counter")
        let text = key("text")
        defer { _ = try? redis.send(["DEL", counter, text]) }

        let replies = try redis.pipeline(Array(repeating: ["INCR", counter], count: 1000))
        #expect(replies.count == 1000)
        #expect(replies.first == .integer(1))
        #expect(replies.last == .integer(1000))
        #expect(replies == (1...1000).map { .integer($0) })

        // An error reply takes its slot in a pipeline instead of throwing.
        let mixed = try redis.pipeline([["SET", text, "x"], ["INCR", text], ["GET", text], []].filter { !$0.isEmpty })
        #expect(mixed.count == 3)
        #expect(mixed[0] == .status("OK"))
        if case .error(let message) = mixed[1] {
            #expect(message.contains("not an integer"))
        } else {
            Issue.record("expected an error reply, got \(mixed[1])")
        }
        #expect(mixed[2].string == "x")
        #expect(try redis.pipeline([]) == [])

        // Binary pipeline inside MULTI/EXEC; error values are scrubbed like thrown errors.
        let secret = "pipeline-secret-\(UUID().uuidString)"
        let binary = try redis.pipeline(bytes: [
            [Array("MULTI".utf8)],
            [Array("SET".utf8), Array(text.utf8), [0x00, 0xFF]],
            [Array("GET".utf8), Array(text.utf8)],
            [Array("EXEC".utf8)],
            [Array("NOSUCHCOMMAND".utf8), Array(secret.utf8)],
        ])
        #expect(binary[0] == .status("OK"))
        #expect(binary[1] == .status("QUEUED"))
        #expect(binary[3] == .array([.status("OK"), .bulk([0x00, 0xFF])]))
        if case .error(let message) = binary[4] {
            #expect(message.contains("unknown command"))
            #expect(!message.contains(secret))
        } else {
            Issue.record("expected an error reply, got \(binary[4])")
        }
    }

    @Test func blockingMoveReturnsValueThenNullOnTimeout() throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        let source = key("queue")
        let processing = key("processing")
        defer { _ = try? redis.send(["DEL", source, processing]) }

        #expect(try redis.send(["LPUSH", source, "job-1"]) == .integer(1))
        let moved = try redis.send(["BLMOVE", source, processing, "RIGHT", "LEFT", "0.1"])
        #expect(moved.string == "job-1")
        #expect(try redis.send(["LRANGE", processing, "0", "-1"]).array?.compactMap(\.string) == ["job-1"])

        let start = ContinuousClock.now
        let empty = try redis.send(["BLMOVE", source, processing, "RIGHT", "LEFT", "0.2"])
        let waited = ContinuousClock.now - start
        #expect(empty == .null)
        #expect(waited >= .milliseconds(150))
        #expect(waited < .seconds(2))
    }

    @Test func subscriptionDeliversMessagesAndIdlesWithoutBreaking() throws {
        var short = configuration
        short.commandTimeout = .milliseconds(200)
        let listener = RedisConnection(lazy: short, label: "subscriber", logger: Logger(label: "test"))
        let publisher = try RedisConnection(configuration: configuration)
        defer {
            listener.close()
            publisher.close()
        }
        let channel = key("channel")
        #expect(throws: RedisError.self) { try listener.nextMessage(timeout: .milliseconds(10)) }  // not subscribed yet
        try listener.subscribe(channel)
        // Idle longer than the socket timeout: poll(2) waits, so the connection survives it.
        #expect(try listener.nextMessage(timeout: .milliseconds(300)) == nil)
        #expect(try publisher.send(["PUBLISH", channel, "one"]) == .integer(1))
        #expect(try publisher.send(["PUBLISH", channel, "two"]) == .integer(1))
        // Both may arrive in one read: the second comes from hiredis's buffer, not the socket.
        let first = try listener.nextMessage(timeout: .seconds(2))
        let second = try listener.nextMessage(timeout: .seconds(2))
        #expect(first?.array?.compactMap(\.string) == ["message", channel, "one"])
        #expect(second?.array?.compactMap(\.string) == ["message", channel, "two"])
        #expect(try listener.nextMessage(timeout: .milliseconds(50)) == nil)
        // The server drops the subscriber: the read fails, and subscribing again works.
        _ = try publisher.send(["CLIENT", "KILL", "TYPE", "pubsub"])
        #expect(throws: RedisError.self) { try listener.nextMessage(timeout: .seconds(2)) }
        try listener.subscribe(channel)
        #expect(try publisher.send(["PUBLISH", channel, "three"]) == .integer(1))
        #expect(try listener.nextMessage(timeout: .seconds(2))?.array?.last?.string == "three")
    }

    @Test func commandTimeoutMapsToTimeoutThenReconnects() throws {
        var short = configuration
        short.commandTimeout = .milliseconds(200)
        let redis = try RedisConnection(configuration: short)
        defer { redis.close() }
        let start = ContinuousClock.now
        #expect(throws: RedisError.timeout) { try redis.send(["BLPOP", key("never"), "5"]) }
        #expect(ContinuousClock.now - start < .seconds(2))
        #expect(try redis.send(["PING"]) == .status("PONG"))
    }

    @Test func noCommandTimeoutLetsLongBlocksFinish() throws {
        // nil means no socket timeout at all, however short the connect timeout is.
        var untimed = configuration
        untimed.connectTimeout = .milliseconds(100)
        untimed.commandTimeout = nil
        let redis = try RedisConnection(configuration: untimed)
        defer { redis.close() }
        #expect(try redis.send(["BLPOP", key("never"), "0.4"]) == .null)
    }

    @Test func connectFailureIsQuick() throws {
        var closed = configuration
        closed.port = 1  // nothing listens on tcpmux; loopback refuses at once
        let start = ContinuousClock.now
        let error = try #require(throws: RedisError.self) { try RedisConnection(configuration: closed) }
        #expect(error.code == .connectionFailed)
        #expect(!error.message.isEmpty)
        #expect(ContinuousClock.now - start < .seconds(1))
    }

    @Test func wrongPasswordFailsWithoutEchoingIt() throws {
        var withPassword = configuration
        withPassword.password = "hunter2-\(UUID().uuidString)"
        let error = try #require(throws: RedisError.self) { try RedisConnection(configuration: withPassword) }
        #expect(error.code == .connectionFailed)
        #expect(!String(describing: error).contains(withPassword.password ?? "?"))
        #expect(!withPassword.description.contains(withPassword.password ?? "?"))
        #expect(withPassword.description.contains("<redacted>"))
    }

    @Test func reconnectsAfterServerKillsTheConnection() throws {
        let redis = try RedisConnection(configuration: configuration)
        let admin = try RedisConnection(configuration: configuration)
        defer {
            redis.close()
            admin.close()
        }
        let firstID = try #require(try redis.send(["CLIENT", "ID"]).int)
        #expect(try admin.send(["CLIENT", "KILL", "ID", "\(firstID)"]) == .integer(1))

        // The closed socket is noticed before a command is written to it: no call fails, the next
        // one reconnects first, on a new server-side client.
        #expect(try redis.send(["PING"]) == .status("PONG"))
        let secondID = try #require(try redis.send(["CLIENT", "ID"]).int)
        #expect(secondID != firstID)
    }

    @Test func largePipelineAfterKillFailsWithoutSIGPIPE() throws {
        // hiredis writes with write(2): without the façade's guard, the second write to the reset
        // socket raises SIGPIPE and kills the test process.
        let redis = try RedisConnection(configuration: configuration)
        let admin = try RedisConnection(configuration: configuration)
        defer {
            redis.close()
            admin.close()
        }
        let target = key("big")
        defer { _ = try? admin.send(["DEL", target]) }
        let id = try #require(try redis.send(["CLIENT", "ID"]).int)
        // Killed by the pipeline's own first command, so the socket closes while the rest is
        // still being written (a connection killed before the call is replaced before it).
        let value = String(repeating: "x", count: 64 * 1024)
        let commands = [["CLIENT", "KILL", "ID", "\(id)", "SKIPME", "no"]] + Array(repeating: ["APPEND", target, value], count: 256)  // 16 MiB
        let error = try #require(throws: RedisError.self) { try redis.pipeline(commands) }
        #expect(error.code == .io)
        #expect(try redis.send(["PING"]) == .status("PONG"))
    }

    @Test func asyncCommandsRunOnTheConnectionQueue() async throws {
        let redis = try RedisConnection(configuration: configuration)
        defer { redis.close() }
        let counter = key("counter")
        defer { _ = try? redis.send(["DEL", counter]) }
        #expect(try await redis.command(["INCRBY", counter, "5"]) == .integer(5))
        let replies = try await redis.pipelined([["INCR", counter], ["GET", counter]])
        #expect(replies == [.integer(6), .bulk(Array("6".utf8))])
        await #expect(throws: RedisError.server) { try await redis.command(["HGET", counter, "field"]) }
    }

    @Test func closedConnectionThrowsClosed() throws {
        let redis = try RedisConnection(configuration: configuration)
        redis.close()
        redis.close()
        #expect(throws: RedisError.closed) { try redis.send(["PING"]) }
    }

    @Test func poolServesFiftyConcurrentCommandsOnFourConnections() async throws {
        let pool = RedisConnectionPool(configuration: configuration, size: 4)
        defer { pool.close() }
        let counter = key("counter")
        let ids = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for _ in 0..<50 {
                group.addTask {
                    try await pool.withConnection { redis in
                        // Blocking calls inside run inline on the connection's queue.
                        let value = try redis.send(["INCR", counter])
                        let id = try redis.send(["CLIENT", "ID"])
                        return (value.int ?? -1, id.int ?? -1)
                    }
                }
            }
            var results: [(Int, Int)] = []
            for try await result in group { results.append(result) }
            return results
        }
        #expect(ids.count == 50)
        #expect(Set(ids.map(\.0)) == Set(1...50))
        let connections = Set(ids.map(\.1))
        #expect(connections.count <= 4)
        #expect(!connections.contains(-1))
        #expect(try await pool.command(["GET", counter]).int == 50)
        _ = try await pool.command(["DEL", counter])
    }

    /// Whether the client named `name` is blocked in `BLPOP` (the pool's only connection busy).
    func isBlocked(_ name: String, admin: RedisConnection) async throws -> Bool {
        let clients = try await admin.command(["CLIENT", "LIST", "TYPE", "normal"]).string ?? ""
        return clients.split(separator: "\n").contains { $0.contains("name=\(name) ") && $0.contains("cmd=blpop") }
    }

    @Test func poolWaitsForABusyConnectionAndCloses() async throws {
        let pool = RedisConnectionPool(configuration: patientConfiguration, size: 1)
        let admin = try RedisConnection(configuration: configuration)
        defer { admin.close() }
        let queue = key("queue")
        let name = "blocker-\(UUID().uuidString.prefix(8))"
        // The only connection blocks in BLPOP; a second caller must wait for it, not fail.
        async let blocked = pool.withConnection { redis in
            _ = try redis.send(["CLIENT", "SETNAME", name])
            return try redis.send(["BLPOP", queue, "120"])
        }
        #expect(try await eventually(timeout: .seconds(5), interval: .milliseconds(10)) { try await isBlocked(name, admin: admin) })
        let finished = Atomic(false)
        let waiter = Task {
            let reply = try await pool.command(["PING"])
            finished.store(true, ordering: .sequentiallyConsistent)
            return reply
        }
        // The PING is parked among the pool's waiters (not failed, not on a second connection).
        let parked = try await eventually(timeout: .seconds(5), interval: .milliseconds(10)) { pool.waiting == 1 }
        let finishedEarly = finished.load(ordering: .sequentiallyConsistent)
        #expect(parked, "the second caller waits for the busy connection")
        #expect(!finishedEarly, "the only connection is busy")
        _ = try admin.send(["LPUSH", queue, "job"])
        #expect(try await blocked == .array([.bulk(Array(queue.utf8)), .bulk(Array("job".utf8))]))
        #expect(try await waiter.value == .status("PONG"))

        pool.close()
        await #expect(throws: RedisError.closed) { try await pool.command(["PING"]) }
    }

    @Test func poolWaiterCanBeCancelled() async throws {
        let pool = RedisConnectionPool(configuration: patientConfiguration, size: 1)
        let admin = try RedisConnection(configuration: configuration)
        defer {
            pool.close()
            admin.close()
        }
        let queue = key("queue")
        let name = "blocker-\(UUID().uuidString.prefix(8))"
        async let blocked = pool.withConnection { redis in
            _ = try redis.send(["CLIENT", "SETNAME", name])
            return try redis.send(["BLPOP", queue, "120"])
        }
        #expect(try await eventually(timeout: .seconds(5), interval: .milliseconds(10)) { try await isBlocked(name, admin: admin) })
        let waiter = Task { try await pool.command(["PING"]) }
        // Cancelled while it waits among the pool's waiters, not before it got there.
        #expect(try await eventually(timeout: .seconds(5), interval: .milliseconds(10)) { pool.waiting == 1 })
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(pool.waiting == 0, "the cancelled waiter left the queue")
        _ = try admin.send(["LPUSH", queue, "job"])
        #expect(try await blocked != .null)
        // The cancelled waiter did not take the connection with it.
        #expect(try await pool.command(["PING"]) == .status("PONG"))
    }
}

@Suite("Hiredis values", .blockingWork)
struct RedisValueTests {
    @Test func conveniences() {
        #expect(RedisValue.bulk(Array("12".utf8)).int == 12)
        #expect(RedisValue.status("OK").string == "OK")
        #expect(RedisValue.integer(3).string == nil)
        #expect(RedisValue.array([.null]).array == [.null])
        #expect(RedisValue.error("ERR").string == nil)
        #expect(RedisValue.null.isNull && !RedisValue.bulk([]).isNull)
        #expect(RedisValue.bulk([0xC3, 0x28]).string == nil)
    }

    @Test func configurationDescriptionRedactsPassword() {
        let config = RedisConfiguration(host: "redis.internal", port: 6380, password: "p@ss")
        #expect(!config.description.contains("p@ss"))
        #expect(config.description.contains("redis.internal"))
        #expect(RedisConfiguration().description.contains("password: none"))
    }

    @Test func errorsCompareByCode() {
        #expect(RedisError.timeout == RedisError.timeout)
        #expect(RedisError.timeout != RedisError.io)
        #expect(RedisError.Code.protocolError.description == "protocolError")
    }
}
