import Foundation
import Hiredis
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import RedisJobQueue
import Synchronization

// The retention row's second half: the scheduler's sweep run under the traffic, every step of it
// timed, the locks it makes validations wait for watched from another connection, and each
// sampled validation judged by what ran while it was in flight.
extension RetentionRow {
    /// One retention step as it ran (monotonic ns).
    struct Step {
        enum Kind: String {
            case create = "create_partitions"
            case drop = "drop_partitions"
            case delete = "delete_batch"
        }

        var kind: Kind
        var start: UInt64
        var end: UInt64
        /// Partitions dropped, or rows deleted.
        var count: Int
    }

    /// ``PostgresExpiredRows`` with every call timed: the steps the stalls are bucketed by.
    final class TimedExpiredRows: ExpiredRows {
        private let rows: PostgresExpiredRows
        let steps = Mutex<[Step]>([])

        init(rows: PostgresExpiredRows) {
            self.rows = rows
        }

        private func timed(_ kind: Step.Kind, _ body: () throws -> Int) rethrows -> Int {
            let start = BenchClock.wall()
            let count = try body()
            let step = Step(kind: kind, start: start, end: BenchClock.wall(), count: count)
            steps.withLock { $0.append(step) }
            return count
        }

        func exclusively(_ body: () throws -> Void) throws -> Bool { try rows.exclusively(body) }

        func deleteBatch(_ kind: RetentionKind, policy: RetentionPolicy, now: Date, limit: Int) throws -> Int {
            try timed(.delete) { try rows.deleteBatch(kind, policy: policy, now: now, limit: limit) }
        }

        func createPartitions(policy: RetentionPolicy, now: Date) throws -> Int {
            try timed(.create) { try rows.createPartitions(policy: policy, now: now) }
        }

        func dropExpiredPartitions(_ kind: RetentionKind, policy: RetentionPolicy, now: Date) throws -> Int {
            try timed(.drop) { try rows.dropExpiredPartitions(kind, policy: policy, now: now) }
        }
    }

    /// The scheduler's ``RetentionSweep`` on a thread of its own, run again `every` after each
    /// run ends, for as long as the traffic flows; and a watcher of the locks its connection makes
    /// other sessions wait for.
    final class Sweeper: @unchecked Sendable {
        let reports = Mutex<[(day: Int, ms: Double, report: RetentionSweep.Report)]>([])
        /// Longest lock wait seen (ms) of a session blocked by the sweep's connection, and of the
        /// sweep's connection itself.
        let longestBlocked = Mutex<(ms: Double, lock: String)>((0, ""))
        let longestOwnWait = Mutex<Double>(0)
        let firstError = Mutex<String?>(nil)
        private let stopping = Atomic<Bool>(false)
        private let finished = DispatchSemaphore(value: 0)
        private let sweep: RetentionSweep
        let rows: TimedExpiredRows
        private let trim: RedisDeadLetterTrim
        private let watch: PostgresConnection
        private let pid: Int
        private let every: Double
        private let day: @Sendable () -> Int

        init(
            sweep: RetentionSweep, configuration: AppConfiguration, every: Double, day: @escaping @Sendable () -> Int
        ) throws {
            let connection = try PostgresConnection(configuration: configuration.postgres, label: "retention")
            pid = try connection.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid") ?? -1
            self.sweep = sweep
            rows = TimedExpiredRows(rows: PostgresExpiredRows(connection: connection))
            trim = RedisDeadLetterTrim(
                connection: try RedisConnection(configuration: configuration.redis, label: "retention"), keys: configuration.keys)
            watch = try PostgresConnection(configuration: configuration.postgres, label: "bench-retention-locks")
            self.every = every
            self.day = day
        }

        func start() {
            let sweeping = Thread { [self] in
                while !stopping.load(ordering: .relaxed) {
                    let clock = BenchClock.wall()
                    do {
                        let report = try sweep.sweep(rows: rows, deadLetters: trim)
                        let ms = Double(BenchClock.wall() &- clock) / 1e6
                        reports.withLock { $0.append((day(), ms, report)) }
                    } catch {
                        firstError.withLock { $0 = $0 ?? "\(error)" }
                    }
                    pause(seconds: every)
                }
                finished.signal()
            }
            sweeping.name = "bench-retention-sweep"
            sweeping.start()
            let watching = Thread { [self] in
                while !stopping.load(ordering: .relaxed) {
                    watchLocks()
                    usleep(10_000)
                }
                finished.signal()
            }
            watching.name = "bench-retention-locks"
            watching.start()
        }

        func stop() {
            stopping.store(true, ordering: .relaxed)
            finished.wait()
            finished.wait()
        }

        /// One look at the lock waits: each waiting lock's age (`waitstart`, Postgres 14+) when the
        /// sweep's session is among its blockers, and the sweep's own. A sample every 10 ms: a wait
        /// is seen at most 10 ms short of its full length.
        private func watchLocks() {
            guard
                let row = try? watch.query(
                    """
                    SELECT COALESCE(max(extract(epoch FROM clock_timestamp() - l.waitstart) * 1000)
                               FILTER (WHERE l.pid <> \(pid)::integer AND \(pid)::integer = ANY(pg_blocking_pids(l.pid))), 0) AS blocked_ms,
                           (SELECT l2.locktype || ' ' || COALESCE(l2.relation::regclass::text, '') || ' ' || l2.mode FROM pg_locks l2
                            WHERE NOT l2.granted AND l2.pid <> \(pid)::integer AND \(pid)::integer = ANY(pg_blocking_pids(l2.pid))
                            ORDER BY l2.waitstart LIMIT 1) AS lock,
                           COALESCE(max(extract(epoch FROM clock_timestamp() - l.waitstart) * 1000) FILTER (WHERE l.pid = \(pid)::integer), 0) AS own_ms
                    FROM pg_locks l WHERE NOT l.granted
                    """
                ).rows.first
            else { return }
            let blocked = row.double("blocked_ms") ?? 0
            let lock = row.string("lock") ?? ""
            longestBlocked.withLock { if blocked > $0.ms { $0 = (blocked, lock) } }
            let own = row.double("own_ms") ?? 0
            longestOwnWait.withLock { $0 = max($0, own) }
        }
    }

    /// The sampled validations (enqueue → result after commit) split by what ran while each was
    /// in flight: any retention step, a partition drop that dropped one, or nothing.
    static func stalls(_ observations: [ResultWatcher.Observation], steps: [Step]) -> [String: Distribution] {
        let any = merged(steps.map { ($0.start, $0.end) })
        let drops = merged(steps.filter { $0.kind == .drop && $0.count > 0 }.map { ($0.start, $0.end) })
        var during: [UInt64] = []
        var duringDrop: [UInt64] = []
        var outside: [UInt64] = []
        for observation in observations {
            let span = (observation.pushedAt, observation.pushedAt &+ observation.latency)
            if overlaps(span, drops) { duringDrop.append(observation.latency) }
            if overlaps(span, any) { during.append(observation.latency) } else { outside.append(observation.latency) }
        }
        return [
            "during_steps": Distribution(nanoseconds: during), "during_drops": Distribution(nanoseconds: duringDrop),
            "outside_steps": Distribution(nanoseconds: outside),
        ]
    }

    /// Disjoint intervals, sorted.
    static func merged(_ intervals: [(UInt64, UInt64)]) -> [(UInt64, UInt64)] {
        var result: [(UInt64, UInt64)] = []
        for interval in intervals.sorted(by: { $0.0 < $1.0 }) {
            if let last = result.last, interval.0 <= last.1 {
                result[result.count - 1].1 = max(last.1, interval.1)
            } else {
                result.append(interval)
            }
        }
        return result
    }

    /// Whether `span` meets one of the disjoint sorted `intervals`.
    static func overlaps(_ span: (UInt64, UInt64), _ intervals: [(UInt64, UInt64)]) -> Bool {
        // The last interval starting before the span ends: the only one that can meet it.
        var low = 0
        var high = intervals.count
        while low < high {
            let middle = (low + high) / 2
            if intervals[middle].0 <= span.1 { low = middle + 1 } else { high = middle }
        }
        return low > 0 && intervals[low - 1].1 >= span.0
    }
}
