import Hiredis

/// Runs a Lua script by SHA on one connection: loaded on first use, and again if Redis lost it
/// (`NOSCRIPT` after a restart or `SCRIPT FLUSH`).
struct ScriptRunner {
    let source: String
    private var sha: String?

    init(source: String) { self.source = source }

    mutating func run(on connection: RedisConnection, keyCount: Int, arguments: [[UInt8]]) throws -> RedisValue {
        do {
            return try connection.send(bytes: try command(connection, keyCount, arguments))
        } catch let error as RedisError where error.code == .server && error.message.hasPrefix("NOSCRIPT") {
            sha = nil
            return try connection.send(bytes: try command(connection, keyCount, arguments))
        }
    }

    private mutating func command(_ connection: RedisConnection, _ keyCount: Int, _ arguments: [[UInt8]]) throws -> [[UInt8]] {
        if sha == nil { sha = try connection.send(["SCRIPT", "LOAD", source]).string }
        guard let sha else { throw RedisQueueError.unexpectedReply("SCRIPT LOAD") }
        return [bytes("EVALSHA"), bytes(sha), bytes(String(keyCount))] + arguments
    }
}
