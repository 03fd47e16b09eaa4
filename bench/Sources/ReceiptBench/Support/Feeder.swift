import Foundation
import Hiredis
import RedisJobQueue
import Synchronization

/// Keeps a Redis queue topped up to a small backlog, as a steady stream of API requests would.
///
/// Every `pollMicros` it reads `LLEN` and pushes (one `LPUSH` of many values) what is missing to
/// reach `backlog`. The backlog is kept small so that a job's wait in the queue stays short next
/// to the App Store's latency, yet never runs dry between two polls (starved polls are counted).
/// By Little's law the mean queue wait is the mean queue length ÷ throughput, which the pipeline
/// row reports next to the latencies.
final class Feeder: @unchecked Sendable {
    struct Settings {
        var backlog: Int
        var maxBatch: Int = 500
        var pollMicros: UInt32 = 1_000
        /// Every n-th job's result key is handed to the watcher (0: none).
        var sampleEvery: Int = 0
    }

    /// Counters, readable from any thread.
    struct Counters {
        var pushed = 0
        var polls = 0
        var queueLengthSum = 0
        var emptyPolls = 0
        /// Wall time spent polling and pushing (the sleeps between polls excluded), and the feeder
        /// thread's own CPU time, in nanoseconds: a feeder busy nearly all the time cannot push faster.
        var busyNanos: UInt64 = 0
        var cpuNanos: UInt64 = 0
        var firstError: String?
    }

    private let redis: RedisConnection
    private let queueKey: String
    private let keys: RedisKeys
    private let factory: JobFactory
    private let settings: Settings
    private let watcher: ResultWatcher?
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let state = Mutex(Counters())
    private(set) var nextSerial: Int

    init(
        redis: RedisConnection, keys: RedisKeys, factory: JobFactory, firstSerial: Int, settings: Settings,
        watcher: ResultWatcher? = nil
    ) {
        self.redis = redis
        self.keys = keys
        self.queueKey = keys.queue("validate")
        self.factory = factory
        self.nextSerial = firstSerial
        self.settings = settings
        self.watcher = watcher
    }

    var counters: Counters { state.withLock { $0 } }

    func start() {
        let thread = Thread { [self] in
            run()
            done.signal()
        }
        thread.name = "bench-feeder"
        thread.start()
    }

    /// Stops pushing and waits for the thread; returns the serial the next feeder should start at.
    @discardableResult
    func stop() -> Int {
        stopping.store(true, ordering: .relaxed)
        done.wait()
        return nextSerial
    }

    private func run() {
        while !stopping.load(ordering: .relaxed) {
            let startedWall = BenchClock.wall()
            let startedCPU = BenchClock.threadCPU()
            do {
                let length = try redis.send(["LLEN", queueKey]).int ?? 0
                let deficit = min(settings.backlog - length, settings.maxBatch)
                state.withLock {
                    $0.polls += 1
                    $0.queueLengthSum += length
                    if length == 0 { $0.emptyPolls += 1 }
                }
                if deficit > 0 {
                    var command: [[UInt8]] = [Array("LPUSH".utf8), Array(queueKey.utf8)]
                    var sampled: [String] = []
                    let now = Date()
                    for _ in 0..<deficit {
                        let job = factory.makeJob(serial: nextSerial, now: now)
                        command.append(job.bytes)
                        if settings.sampleEvery > 0, nextSerial % settings.sampleEvery == 0 {
                            sampled.append(job.id.uuidString.lowercased())
                        }
                        nextSerial += 1
                    }
                    let pushedAt = BenchClock.wall()
                    _ = try redis.send(bytes: command)
                    watcher?.expect(sampled, pushedAt: pushedAt)
                    state.withLock { $0.pushed += deficit }
                }
            } catch {
                state.withLock { if $0.firstError == nil { $0.firstError = "\(error)" } }
                usleep(100_000)
            }
            let busy = BenchClock.wall() &- startedWall
            let cpu = BenchClock.threadCPU() &- startedCPU
            state.withLock {
                $0.busyNanos &+= busy
                $0.cpuNanos &+= cpu
            }
            usleep(settings.pollMicros)
        }
    }
}

/// Sees when sampled jobs are done, as a waiting API request does: the worker publishes each
/// job's result on the channel its envelope names (after the Postgres commit), and this thread
/// listens there. Only a sample of jobs is timed.
final class ResultWatcher: @unchecked Sendable {
    /// One observed job: when it was pushed and how long until its result appeared (ns, monotonic).
    struct Observation {
        var pushedAt: UInt64
        var latency: UInt64
    }

    private let redis: RedisConnection
    private let channel: String
    private let inbox = Mutex<[(id: String, pushedAt: UInt64)]>([])
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let results = Mutex<[Observation]>([])
    private let lost = Atomic<Int>(0)

    init(redis: RedisConnection, keys: RedisKeys) {
        self.redis = redis
        self.channel = keys.results(JobFactory.resultNode)
    }

    /// Subscribes (before any job is pushed, so no result is missed) and starts listening.
    func start() throws {
        try redis.subscribe(channel)
        let thread = Thread { [self] in
            run()
            done.signal()
        }
        thread.name = "bench-watcher"
        thread.start()
    }

    func expect(_ ids: [String], pushedAt: UInt64) {
        guard !ids.isEmpty else { return }
        inbox.withLock { $0 += ids.map { ($0, pushedAt) } }
    }

    /// Stops watching; returns the observations and how many sampled jobs were never seen.
    func stop() -> (observations: [Observation], unseen: Int) {
        stopping.store(true, ordering: .relaxed)
        done.wait()
        return (results.withLock { $0 }, lost.load(ordering: .relaxed))
    }

    private func run() {
        var outstanding: [String: UInt64] = [:]
        while !stopping.load(ordering: .relaxed) {
            let arrived: [(id: String, pushedAt: UInt64)] = inbox.withLock { items in
                let taken = items
                items.removeAll()
                return taken
            }
            for item in arrived { outstanding[item.id] = item.pushedAt }
            do {
                guard let message = try redis.nextMessage(timeout: .milliseconds(50)) else { continue }
                let now = BenchClock.wall()
                guard case .array(let parts) = message, parts.count == 3, case .bulk(let payload) = parts[2], payload.count >= 36
                else { continue }
                let id = String(decoding: payload.prefix(36), as: UTF8.self)
                guard let pushedAt = outstanding.removeValue(forKey: id) else { continue }
                results.withLock { $0.append(Observation(pushedAt: pushedAt, latency: now &- pushedAt)) }
            } catch {
                usleep(10_000)
            }
            // A job that never finishes (buried, lost) must not stay on the watch list forever.
            let cutoff = BenchClock.wall() &- 60_000_000_000
            for (id, pushedAt) in outstanding where pushedAt < cutoff {
                outstanding[id] = nil
                lost.add(1, ordering: .relaxed)
            }
        }
        // Expected but never moved to the watch list (the stop came first) are unseen too.
        lost.add(outstanding.count + inbox.withLock { $0.count }, ordering: .relaxed)
    }
}
