import Foundation
import Hiredis
import ReceiptCore

/// ``VerifyReceiptWatch`` in Redis: one script per batch, so the run of 404/410 answers is
/// counted across every worker process and declared gone once.
///
/// Not thread-safe: the worker's fetcher owns one.
public final class RedisVerifyReceiptWatch: VerifyReceiptWatch {
    private let connection: RedisConnection
    private let keys: RedisKeys

    /// Creates a watch on `connection`.
    public init(connection: RedisConnection, keys: RedisKeys) {
        self.connection = connection
        self.keys = keys
    }

    public func record(
        gone: Int, answered: Int, deprecation: Date?, sunset: Date?, goneAfter: Int, now: Date
    ) throws -> VerifyReceiptLifecycle {
        func ms(_ date: Date?) -> String { date.map { String(Int64(($0.timeIntervalSince1970 * 1000).rounded())) } ?? "0" }
        let reply = try RedisScriptRunner.run(
            RedisScripts.verifyReceiptLifecycle, keys: [keys.verifyReceiptLifecycle],
            arguments: [
                String(max(0, gone)), String(max(0, answered)), ms(deprecation), ms(sunset), String(max(1, goneAfter)), ms(now),
            ].map(bytes), on: connection)
        guard let values = reply.array, values.count == 3 else { throw RedisQueueError.unexpectedReply("verifyReceipt lifecycle") }
        func date(_ value: RedisValue) -> Date? { value.string.flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) } }
        return VerifyReceiptLifecycle(goneSince: date(values[0]), deprecation: date(values[1]), sunset: date(values[2]))
    }
}
