import Foundation
import Hiredis
import ReceiptCore

/// ``CustomerJobPurge`` in Redis: an erased customer's jobs dropped from every structure a job can
/// sit in (``RedisKeys``): the ready queues (`queue:<kind>`), the lanes' held jobs
/// (`processing:<worker>`), the retries (`retry`) and the dead letters (`dead`), with the keys
/// that belong to a dropped job alone: its pending resource (`pending:<id>`), its recovery count
/// (`recoveries:<id>`) and the idempotency key naming it (`idem:<app>:<sha>`, so that the receipt
/// sent again is queued again, not answered with the dropped job's id).
///
/// A job names its app and user in its envelope, not in any key, so the purge reads every job once,
/// ``chunk`` at a time, and removes the customer's by their exact bytes (`LREM`, `ZREM`): an
/// operator's action, bounded by the queues' length and never blocking Redis longer than one chunk.
/// A job a worker holds at that instant may still write its result after the database's
/// erasure: erasing again (idempotent) removes it.
public struct RedisCustomerJobPurge: CustomerJobPurge {
    private let pool: RedisConnectionPool
    private let keys: RedisKeys
    /// Jobs (or keys) read per round trip.
    static let chunk = 500

    /// Creates the purge on `pool`, under `keys`.
    public init(pool: RedisConnectionPool, keys: RedisKeys) {
        self.pool = pool
        self.keys = keys
    }

    public func dropJobs(of customer: ErasedCustomer) async throws -> Int {
        var dropped: Set<UUID> = []
        let lists =
            try await scanKeys(matching: Self.glob(keys.queue("")) + "*") + (try await scanKeys(matching: Self.glob(keys.processing("")) + "*"))
        for key in lists {
            let members = try await matching(customer, in: key, range: "LRANGE")
            for (raw, id) in members {
                if try await pool.withConnection({ try $0.send(bytes: [bytes("LREM"), bytes(key), bytes("0"), raw]) }).int ?? 0 > 0 {
                    dropped.insert(id)
                }
            }
        }
        for key in [keys.retry, keys.dead] {
            let members = try await matching(customer, in: key, range: "ZRANGE")
            for (raw, id) in members where try await pool.withConnection({ try $0.send(bytes: [bytes("ZREM"), bytes(key), raw]) }).int ?? 0 > 0 {
                dropped.insert(id)
            }
        }
        try await forget(dropped, appID: customer.appID)
        return dropped.count
    }

    /// The members of the list or sorted set `key` that are the customer's jobs, with their ids.
    private func matching(_ customer: ErasedCustomer, in key: String, range: String) async throws -> [([UInt8], UUID)] {
        var found: [([UInt8], UUID)] = []
        var start = 0
        while true {
            let reply = try await pool.withConnectionRetryingOnce { [start] in
                try $0.send([range, key, String(start), String(start + Self.chunk - 1)])
            }
            guard case .array(let items) = reply else { throw RedisQueueError.unexpectedReply(range) }
            for case .bulk(let raw) in items {
                guard let envelope = try? JobEnvelope.decode(raw), customer.holds(envelope) else { continue }
                found.append((raw, envelope.header.id))
            }
            if items.count < Self.chunk { return found }
            start += items.count
        }
    }

    /// Deletes the dropped jobs' own keys, and the app's idempotency keys that name one of them.
    private func forget(_ ids: Set<UUID>, appID: UUID) async throws {
        guard !ids.isEmpty else { return }
        let own = ids.flatMap { [keys.pending($0.canonical), keys.recoveries($0.canonical)] }
        _ = try await pool.withConnection { try $0.send(["DEL"] + own) }
        let idempotency = try await scanKeys(matching: Self.glob(keys.idempotency(app: appID.canonical, receiptSHA256: "")) + "*")
        for start in stride(from: 0, to: idempotency.count, by: Self.chunk) {
            let batch = Array(idempotency[start..<min(start + Self.chunk, idempotency.count)])
            let reply = try await pool.withConnection { try $0.send(["MGET"] + batch) }
            guard case .array(let values) = reply else { throw RedisQueueError.unexpectedReply("MGET") }
            let stale = zip(batch, values).compactMap { key, value in
                // 'id' or 'id claimant' (RedisScripts.intakeEnqueue).
                value.string.flatMap { UUID(uuidString: String($0.prefix { $0 != " " })) }.map(ids.contains) == true ? key : nil
            }
            if !stale.isEmpty { _ = try await pool.withConnection { try $0.send(["DEL"] + stale) } }
        }
    }

    /// Every key matching `pattern`, by `SCAN` (never `KEYS`: it would block Redis).
    private func scanKeys(matching pattern: String) async throws -> [String] {
        var found: Set<String> = []
        var cursor = "0"
        repeat {
            let reply = try await pool.withConnectionRetryingOnce { [cursor] in
                try $0.send(["SCAN", cursor, "MATCH", pattern, "COUNT", String(Self.chunk)])
            }
            guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string, case .array(let names) = parts[1] else {
                throw RedisQueueError.unexpectedReply("SCAN")
            }
            found.formUnion(names.compactMap(\.string))
            cursor = next
        } while cursor != "0"
        return found.sorted()
    }

    /// `text` with the glob's special characters escaped, for a `MATCH` on a literal prefix.
    static func glob(_ text: String) -> String {
        var escaped = ""
        for character in text {
            if "*?[]\\".contains(character) { escaped.append("\\") }
            escaped.append(character)
        }
        return escaped
    }
}
