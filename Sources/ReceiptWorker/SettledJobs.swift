import Foundation
import ReceiptCore

/// The settlements this process made lately, so that a job a failover put back in its processing
/// list is settled again as it was, not validated a second time.
///
/// A settle the primary answered and died (or was cut off) before passing to its replicas is lost
/// with it: the promoted replica still lists the job in this process's processing list, with its
/// `pending` key, though the result is committed in Postgres and the process let the job go. The
/// fetcher's reconcile finds such a job (``JobQueue/reconcile(keeping:settledAgain:)``) and asks
/// here how it was settled.
///
/// Kept for ``retention`` and at most ``capacity`` settlements, oldest out first: a failover is
/// noticed within seconds (the command timeout, the next heartbeat), so a couple of minutes is
/// plenty, and a busy worker's few thousand entries cost a few hundred kilobytes. The job's bytes
/// are not kept: a stray is matched by a hash of them plus their length (the stray's own bytes are
/// what the repeated settle removes), and by its envelope's id.
///
/// Thread-safe: the committers record, the fetcher looks up.
final class SettledJobs: @unchecked Sendable {
    /// How a job was settled, without the job.
    private enum Outcome {
        case acknowledged(result: [UInt8]?)
        case retried(updated: JobEnvelope, runAt: Date)
        case buried(updated: JobEnvelope?, at: Date)
    }

    private struct Entry {
        var length: Int
        var id: UUID?
        var outcome: Outcome
        /// Its place in `order`: an older place of the same bytes does not remove it.
        var sequence: Int
    }

    /// How long a settlement is remembered.
    let retention: Duration
    /// The most settlements remembered.
    let capacity: Int
    private let lock = NSLock()
    private var entries: [Int: Entry] = [:]
    /// Keys in the order recorded, with when; `head` is the oldest still counted.
    private var order: [(key: Int, at: Date, sequence: Int)] = []
    private var head = 0
    private var sequence = 0

    init(retention: Duration = .seconds(120), capacity: Int = 20_000) {
        self.retention = retention
        self.capacity = max(1, capacity)
    }

    /// Remembers a batch the queue took.
    func record(_ settlements: [Settlement], at now: Date) {
        lock.withLock {
            for settlement in settlements {
                let outcome: Outcome
                switch settlement {
                case .acknowledge(_, let result): outcome = .acknowledged(result: result)
                case .retry(_, let updated, let runAt): outcome = .retried(updated: updated, runAt: runAt)
                case .bury(_, let updated, let at): outcome = .buried(updated: updated, at: at)
                }
                let raw = settlement.job.raw
                let key = Self.key(raw)
                sequence += 1
                entries[key] = Entry(length: raw.count, id: settlement.job.envelope?.id, outcome: outcome, sequence: sequence)
                order.append((key, now, sequence))
            }
            prune(now: now)
        }
    }

    /// The settlement this process made of `job`, rebuilt on the stray's own bytes; nil when it
    /// made none lately (then the job is given back to its queue).
    func settlement(of job: ReservedJob, now: Date) -> Settlement? {
        lock.withLock {
            prune(now: now)
            guard let entry = entries[Self.key(job.raw)], entry.length == job.raw.count, entry.id == job.envelope?.id else { return nil }
            switch entry.outcome {
            case .acknowledged(let result): return .acknowledge(job, result: result)
            case .retried(let updated, let runAt): return .retry(job, updated: updated, runAt: runAt)
            case .buried(let updated, let at): return .bury(job, updated: updated, at: at)
            }
        }
    }

    /// How many settlements are remembered; for tests.
    var count: Int { lock.withLock { entries.count } }

    private func prune(now: Date) {
        let cutoff = now.addingTimeInterval(-retention.seconds)
        while head < order.count, order.count - head > capacity || order[head].at < cutoff {
            let gone = order[head]
            head += 1
            // A later record of the same bytes (a job settled twice) keeps its entry.
            if entries[gone.key]?.sequence == gone.sequence { entries[gone.key] = nil }
        }
        if head > 1024, head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }

    /// The job's bytes, hashed for this process (a seeded hash: it never leaves memory).
    private static func key(_ raw: [UInt8]) -> Int {
        var hasher = Hasher()
        raw.withUnsafeBytes { hasher.combine(bytes: $0) }
        return hasher.finalize()
    }
}
