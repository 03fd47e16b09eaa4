import Foundation
import Hiredis
import ReceiptCore

/// The ingestion API's side of Redis: queue a job durably, wait for its result.
public final class RedisIntake: ReceiptIntake {
    private let pool: RedisConnectionPool
    private let keys: RedisKeys
    private let pendingTTLSeconds: Int

    /// Creates the intake.
    /// - Parameters:
    ///   - pool: connections for the API's handlers.
    ///   - keys: the key schema.
    ///   - pendingTTL: how long a pending resource is kept when no worker ever stores the receipt
    ///     (longer than the retry policy's maximum age).
    public init(pool: RedisConnectionPool, keys: RedisKeys, pendingTTL: Duration = .seconds(8 * 86_400)) {
        self.pool = pool
        self.keys = keys
        self.pendingTTLSeconds = Int(pendingTTL.seconds)
    }

    public func enqueue(_ envelope: JobEnvelope, pending: ReceiptResource) async throws {
        let id = envelope.id.uuidString.lowercased()
        let job = envelope.encoded()
        let pendingJSON = pending.encoded()
        let queue = keys.queue(envelope.kind.rawValue)
        let pendingKey = keys.pending(id)
        let ttl = String(pendingTTLSeconds)
        let replies = try await pool.withConnection { connection in
            try connection.pipeline(bytes: [
                [Array("MULTI".utf8)],
                [Array("SET".utf8), Array(pendingKey.utf8), pendingJSON, Array("EX".utf8), Array(ttl.utf8)],
                [Array("LPUSH".utf8), Array(queue.utf8), job],
                [Array("EXEC".utf8)],
            ])
        }
        // Only an EXEC that ran both commands means the receipt is durably queued.
        guard case .array(let results)? = replies.last, results.count == 2 else {
            throw RedisQueueError.transactionFailed("enqueue not committed")
        }
    }

    public func awaitResult(id: UUID, timeout: Duration) async throws -> ReceiptResource? {
        let key = keys.result(id.uuidString.lowercased())
        let seconds = String(format: "%.3f", max(timeout.seconds, 0.01))
        let reply = try await pool.withConnection { connection in
            try connection.send(["BLPOP", key, seconds])
        }
        guard case .array(let items) = reply, items.count == 2, case .bulk(let bytes) = items[1] else { return nil }
        return try? ReceiptResource.decode(bytes)
    }

    public func pendingResource(id: UUID) async throws -> ReceiptResource? {
        let reply = try await pool.command(["GET", keys.pending(id.uuidString.lowercased())])
        guard case .bulk(let bytes) = reply else { return nil }
        return try? ReceiptResource.decode(bytes)
    }

    public func ping() async -> Bool {
        (try? await pool.command(["PING"])) == .status("PONG")
    }
}
