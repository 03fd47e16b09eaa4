import Hiredis
import OpenSSL

/// One Lua script of the catalog (``RedisScripts``): its name, its source, and the SHA-1 Redis
/// knows it by.
///
/// The script and its runner belong to this adapter, not to the hiredis façade: which scripts
/// exist, which keys they touch and what to do when Redis has forgotten one are the queue's
/// protocol with Redis, while the façade only sends commands and maps errors.
struct RedisScript: Sendable {
    /// The script's versioned name, e.g. `receiptq:promote_due:v5`: its source's first line, so
    /// that `SLOWLOG`, `MONITOR` and `SCRIPT` output say which script and which version ran.
    let name: String
    /// The Lua source, starting with the `-- <name>` line.
    let source: String
    /// The lower-case hex SHA-1 of ``source``, as `EVALSHA` wants it: computed once, here, so no
    /// caller ever asks Redis with `SCRIPT LOAD`.
    let sha: String

    /// Creates a catalog entry.
    /// - Parameters:
    ///   - name: the script's name without the `receiptq:` namespace, e.g. `promote_due`.
    ///   - version: bumped on every change, so that two versions are told apart by name too.
    ///   - body: the Lua source after the name line.
    init(name: String, version: Int, body: String) {
        self.name = "receiptq:\(name):v\(version)"
        self.source = "-- \(self.name)\n\(body)"
        self.sha = Digest.hex(Digest.sha1(Array(source.utf8)))
    }
}

/// Runs catalog scripts: `EVALSHA` first, and when Redis answers `NOSCRIPT` (it restarted, failed
/// over to a replica, or had its cache flushed) the same call once more with `EVAL`, which runs the
/// source and gives Redis the script back for the next `EVALSHA`. This is Sidekiq's
/// `Sidekiq::Scripts` discipline, with `EVAL` instead of `SCRIPT LOAD` plus a retry: one round trip
/// for the fallback, and it works inside a pipeline as well.
///
/// A `NOSCRIPT` reply means nothing ran, so the second call can never run the script twice.
///
/// Two entry points over one ``Call``: blocking on a connection its owner's thread holds, and
/// async through a sender such as the intake's group-committed pipeline.
enum RedisScriptRunner {
    /// Runs `script` on a blocking connection.
    /// - Parameters:
    ///   - script: the catalog entry.
    ///   - keys: the keys it touches (`KEYS`), every one built by ``RedisKeys``.
    ///   - arguments: its `ARGV`, as bytes (a job is passed byte for byte).
    ///   - connection: the caller's connection, used from the caller's thread.
    /// - Returns: the script's reply.
    /// - Throws: `RedisError` when Redis cannot be reached or the script failed.
    static func run(_ script: RedisScript, keys: [String], arguments: [[UInt8]], on connection: RedisConnection) throws -> RedisValue {
        let call = Call(script: script, keys: keys, arguments: arguments)
        let first = Result { try connection.send(bytes: call.bySHA) }
        guard let fallback = call.fallback(after: first) else { return try first.get() }
        return try connection.send(bytes: fallback)
    }

    /// Runs `script` through `send`, which may answer an error reply as a value (a pipeline does)
    /// or throw it.
    /// - Parameters:
    ///   - script: the catalog entry.
    ///   - keys: the keys it touches (`KEYS`), every one built by ``RedisKeys``.
    ///   - arguments: its `ARGV`, as bytes.
    ///   - send: sends one command and returns its reply.
    /// - Returns: the script's reply, an error reply included when `send` returns those.
    /// - Throws: what `send` throws.
    static func run(
        _ script: RedisScript, keys: [String], arguments: [[UInt8]], via send: (_ command: [[UInt8]]) async throws -> RedisValue
    ) async throws -> RedisValue {
        let call = Call(script: script, keys: keys, arguments: arguments)
        let first: Result<RedisValue, any Error>
        do { first = .success(try await send(call.bySHA)) } catch { first = .failure(error) }
        guard let fallback = call.fallback(after: first) else { return try first.get() }
        return try await send(fallback)
    }

    /// One call of a script: the commands that run it, and the one decision of when to fall back.
    struct Call {
        let script: RedisScript
        let keys: [String]
        let arguments: [[UInt8]]

        /// `EVALSHA sha numkeys keys… args…`
        var bySHA: [[UInt8]] { command("EVALSHA", script.sha) }

        /// `EVAL source numkeys keys… args…`
        var bySource: [[UInt8]] { command("EVAL", script.source) }

        /// The command to send again after `reply` to ``bySHA``: ``bySource`` when Redis did not
        /// have the script, otherwise nil (the reply stands, error or not).
        func fallback(after reply: Result<RedisValue, any Error>) -> [[UInt8]]? {
            switch reply {
            case .success(.error(let message)) where Self.isNoScript(message): bySource
            case .failure(let error as RedisError) where error.code == .server && Self.isNoScript(error.message): bySource
            default: nil
            }
        }

        private static func isNoScript(_ message: String) -> Bool { message.hasPrefix("NOSCRIPT") }

        private func command(_ verb: String, _ script: String) -> [[UInt8]] {
            [bytes(verb), bytes(script), bytes(String(keys.count))] + keys.map(bytes) + arguments
        }
    }
}
