import Foundation
import Hiredis
import ReceiptTesting
import SystemTesting
import Testing

@testable import RedisJobQueue

/// The script catalog and its runner against a real Redis: every script is the one Redis names by
/// the catalog's SHA, and a script Redis does not have runs once, by source, then by SHA.
@Suite("Redis scripts: one catalog, one runner", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct RedisScriptsTests {
    /// A connection, and a prefix of its own whose keys `close()` deletes.
    final class Fixture {
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let redis: RedisConnection

        init() throws {
            redis = try RedisConnection(configuration: RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort))
        }

        /// A script no Redis has seen (its name is unique): it counts its runs in `KEYS[1]`.
        func unseenScript() -> RedisScript {
            RedisScript(name: "test_counter_\(UUID().uuidString.lowercased())", version: 1, body: "return redis.call('INCR', KEYS[1])")
        }

        func isLoaded(_ script: RedisScript) throws -> Bool {
            try redis.send(["SCRIPT", "EXISTS", script.sha]).array?.first?.int == 1
        }

        func close() {
            _ = try? RedisCleanup.deleteKeys(prefix: keys.prefix, redis)
            redis.close()
        }
    }

    @Test("Every script has its own name, starts with it, and Redis knows it by the SHA the catalog computed")
    func catalog() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        #expect(RedisScripts.all.count == 13)
        #expect(Set(RedisScripts.all.map(\.name)).count == RedisScripts.all.count)
        #expect(Set(RedisScripts.all.map(\.sha)).count == RedisScripts.all.count)
        for script in RedisScripts.all {
            #expect(script.name.hasPrefix("receiptq:"))
            #expect(script.source.hasPrefix("-- \(script.name)\n"))
            #expect(try fixture.redis.send(["SCRIPT", "LOAD", script.source]).string == script.sha, "\(script.name)")
        }
    }

    @Test("Blocking: a script Redis lacks runs exactly once by source, and is then known by its SHA")
    func blockingFallback() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let script = fixture.unseenScript()
        let counter = fixture.keys.recoveries("runner-test")
        #expect(try !fixture.isLoaded(script))
        #expect(try RedisScriptRunner.run(script, keys: [counter], arguments: [], on: fixture.redis) == .integer(1))
        #expect(try fixture.isLoaded(script))
        #expect(try RedisScriptRunner.run(script, keys: [counter], arguments: [], on: fixture.redis) == .integer(2))
    }

    @Test("Through a pipeline, whose error replies are values: EVALSHA, then EVAL once, then EVALSHA alone")
    func pipelinedFallback() async throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let script = fixture.unseenScript()
        let counter = fixture.keys.recoveries("runner-test")
        var sent: [String] = []
        func send(_ command: [[UInt8]]) async throws -> RedisValue {
            sent.append(String(decoding: command[0], as: UTF8.self))
            return try fixture.redis.pipeline(bytes: [command])[0]
        }
        #expect(try await RedisScriptRunner.run(script, keys: [counter], arguments: [], via: send) == .integer(1))
        #expect(sent == ["EVALSHA", "EVAL"])
        sent = []
        #expect(try await RedisScriptRunner.run(script, keys: [counter], arguments: [], via: send) == .integer(2))
        #expect(sent == ["EVALSHA"])
    }

    @Test("Only NOSCRIPT falls back: a script's own error, or a lost connection, stands")
    func otherErrorsStand() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let failing = RedisScript(name: "test_failing_\(UUID().uuidString.lowercased())", version: 1, body: "return redis.error_reply('ERR boom')")
        let call = RedisScriptRunner.Call(script: failing, keys: [], arguments: [])
        // Unknown to Redis: the thrown NOSCRIPT and its pipelined reply both lead to the source.
        let thrown = Result { try fixture.redis.send(bytes: call.bySHA) }
        #expect(call.fallback(after: thrown) == call.bySource)
        let replied = try fixture.redis.pipeline(bytes: [call.bySHA])[0]
        #expect(call.fallback(after: .success(replied)) == call.bySource)
        // Known, failing: its error is the answer.
        #expect(throws: RedisError.server) { try RedisScriptRunner.run(failing, keys: [], arguments: [], on: fixture.redis) }
        #expect(call.fallback(after: .success(.error("ERR boom"))) == nil)
        #expect(call.fallback(after: .failure(RedisError.io)) == nil)
        #expect(call.fallback(after: .success(.integer(1))) == nil)
    }
}

@Suite("Redis queue errors", .blockingWork)
struct RedisQueueErrorTests {
    @Test("The codes are a closed set whose strings stay what logs and metrics saw")
    func codes() {
        #expect(RedisQueueError.Code.allCases.map(\.rawValue) == ["transaction_failed", "unexpected_reply", "replication_timeout"])
        #expect(RedisQueueError.unexpectedReply("ZCARD").description == "RedisQueueError.unexpected_reply: unexpected reply to ZCARD")
        #expect(RedisQueueError.transactionFailed("EXEC aborted").code == .transactionFailed)
    }
}
