import Foundation
import Hiredis
import ReceiptCore

/// Drops the dead letters that died before a cutoff (the retention step's Redis side), a bounded
/// number at a time: the oldest are read by score and removed by member, so a letter retried or
/// deleted by an operator in between is simply not found.
public final class RedisDeadLetterTrim: DeadLetterTrim {
    private let connection: RedisConnection
    private let keys: RedisKeys

    /// Creates the trim on its own connection.
    public init(connection: RedisConnection, keys: RedisKeys) {
        self.connection = connection
        self.keys = keys
    }

    public func trimDeadLetters(before cutoff: Date, limit: Int) throws -> Int {
        guard limit > 0 else { return 0 }
        // Exclusive: a letter that died at the cutoff itself stays.
        let score = "(" + String(Int64((cutoff.timeIntervalSince1970 * 1000).rounded(.down)))
        guard case .array(let members) = try connection.send(["ZRANGEBYSCORE", keys.dead, "-inf", score, "LIMIT", "0", String(limit)]),
            !members.isEmpty
        else { return 0 }
        let arguments = [Array("ZREM".utf8), Array(keys.dead.utf8)] + members.compactMap(\.bytes)
        return try connection.send(bytes: arguments).int ?? 0
    }
}
