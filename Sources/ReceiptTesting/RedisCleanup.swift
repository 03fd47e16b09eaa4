import Hiredis

/// Deletes every key under a prefix (SCAN + UNLINK in batches), so that a bench run or a test
/// leaves nothing behind in a Redis that outlives it (a test's idempotency and pending keys live
/// for days otherwise).
public enum RedisCleanup {
    /// - Returns: how many keys were deleted.
    @discardableResult
    public static func deleteKeys(prefix: String, _ redis: RedisConnection) throws -> Int {
        var cursor = "0"
        var deleted = 0
        // The prefix holds `{…}`, which Redis globs treat literally; escape the glob characters anyway.
        let pattern = prefix.map { "*?[]\\".contains($0) ? "\\\($0)" : String($0) }.joined() + "*"
        repeat {
            let reply = try redis.send(["SCAN", cursor, "MATCH", pattern, "COUNT", "2000"])
            guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string else { break }
            cursor = next
            let keys = parts[1].array?.compactMap(\.string) ?? []
            if !keys.isEmpty {
                _ = try redis.send(["UNLINK"] + keys)
                deleted += keys.count
            }
        } while cursor != "0"
        return deleted
    }
}
