import Foundation
import Hiredis
import ReceiptCore

/// ``VerifyReceiptWatch`` in Redis: one script per batch, so the run of 404/410 answers is
/// counted across every worker process and declared gone once.
///
/// Not thread-safe: the worker's fetcher owns one.
public final class RedisVerifyReceiptWatch: VerifyReceiptWatch {
    static let script = """
        -- receiptq:verifyreceipt-lifecycle:v1
        -- KEYS: lifecycle hash. ARGV: gone, answered, deprecation ms (0: none), sunset ms (0: none), gone after, now ms.
        local gone, answered = tonumber(ARGV[1]), tonumber(ARGV[2])
        local run = tonumber(redis.call('HGET', KEYS[1], 'run') or '0')
        if answered > 0 then
          -- It answers again (an answer in the batch ends the run, whatever came before it).
          run = 0
          redis.call('HDEL', KEYS[1], 'gone_since')
        end
        run = run + gone
        redis.call('HSET', KEYS[1], 'run', run)
        if run >= tonumber(ARGV[5]) and not redis.call('HGET', KEYS[1], 'gone_since') then
          redis.call('HSET', KEYS[1], 'gone_since', ARGV[6])
        end
        if ARGV[3] ~= '0' then redis.call('HSET', KEYS[1], 'deprecation', ARGV[3]) end
        if ARGV[4] ~= '0' then redis.call('HSET', KEYS[1], 'sunset', ARGV[4]) end
        return redis.call('HMGET', KEYS[1], 'gone_since', 'deprecation', 'sunset')
        """

    private let connection: RedisConnection
    private let keys: RedisKeys
    private var runner = ScriptRunner(source: script)

    /// Creates a watch on `connection`.
    public init(connection: RedisConnection, keys: RedisKeys) {
        self.connection = connection
        self.keys = keys
    }

    public func record(
        gone: Int, answered: Int, deprecation: Date?, sunset: Date?, goneAfter: Int, now: Date
    ) throws -> VerifyReceiptLifecycle {
        func ms(_ date: Date?) -> String { date.map { String(Int64(($0.timeIntervalSince1970 * 1000).rounded())) } ?? "0" }
        let reply = try runner.run(
            on: connection, keyCount: 1,
            arguments: [
                bytes(keys.verifyReceiptLifecycle), bytes(String(max(0, gone))), bytes(String(max(0, answered))), bytes(ms(deprecation)),
                bytes(ms(sunset)), bytes(String(max(1, goneAfter))), bytes(ms(now)),
            ])
        guard let values = reply.array, values.count == 3 else { throw RedisQueueError.unexpectedReply("verifyReceipt lifecycle") }
        func date(_ value: RedisValue) -> Date? { value.string.flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) } }
        return VerifyReceiptLifecycle(goneSince: date(values[0]), deprecation: date(values[1]), sunset: date(values[2]))
    }
}
