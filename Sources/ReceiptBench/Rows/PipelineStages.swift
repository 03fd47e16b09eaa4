import Foundation
import ReceiptCore
import Synchronization

/// Per-stage timers for the pipeline row's profile: decorators around a worker lane's four ports
/// (queue, store, verifier, circuit) that time every call with the lane thread's CPU clock and the
/// wall clock. They wrap the real adapters (hiredis, libpq, libcurl) and run under the real
/// `WorkerPool` and `JobProcessor`, so nothing of the worker's code path is replaced; only the
/// process differs (the bench's instead of `receiptq work`'s).
enum PipelineStage: String, CaseIterable, Sendable {
    /// BLMOVE + parsing the envelope's JSON (`ReservedJob.init`); only reserves that got a job.
    case reserve
    /// EVALSHA of the outage circuit before calling Apple.
    case permission
    /// The app lookup (cached per lane for 30 s).
    case app
    /// The App Store call: request JSON, curl (HTTP keep-alive), response JSON.
    case verify
    /// EVALSHA recording Apple's answer in the circuit.
    case record
    /// The Postgres transaction: INSERT receipt, purchases, attempt; read the resource back; COMMIT.
    case save
    /// MULTI/EXEC: result LPUSH + EXPIRE, DEL pending, LREM from processing.
    case acknowledge
    /// Everything from a job's reserve returning to its acknowledgement returning, minus reserve.
    case job
}

/// One lane's timings; written only by its lane's thread, read after the pool stopped.
final class StageRecorder: @unchecked Sendable {
    struct Timing {
        var calls = 0
        var cpu: UInt64 = 0
        var wall: [UInt64] = []
    }

    private(set) var timings: [PipelineStage: Timing] = [:]
    /// A sample of the results the lane published (for the JSON micro-timings).
    var sampleResult: [UInt8]?
    private var jobStartCPU: UInt64 = 0
    private var jobStartWall: UInt64 = 0

    func time<T>(_ stage: PipelineStage, _ body: () throws -> T) rethrows -> T {
        let wall0 = BenchClock.wall()
        let cpu0 = BenchClock.threadCPU()
        defer { add(stage, cpu: BenchClock.threadCPU() &- cpu0, wall: BenchClock.wall() &- wall0) }
        return try body()
    }

    func add(_ stage: PipelineStage, cpu: UInt64, wall: UInt64) {
        timings[stage, default: Timing()].calls += 1
        timings[stage, default: Timing()].cpu &+= cpu
        timings[stage, default: Timing()].wall.append(wall)
    }

    func jobStarted() {
        jobStartCPU = BenchClock.threadCPU()
        jobStartWall = BenchClock.wall()
    }

    func jobFinished() {
        guard jobStartWall != 0 else { return }
        add(.job, cpu: BenchClock.threadCPU() &- jobStartCPU, wall: BenchClock.wall() &- jobStartWall)
        jobStartWall = 0
    }

    /// Forgets everything (the end of the warm-up).
    func reset() {
        timings = [:]
    }
}

/// The registry of every lane's recorder, so the row can read them after the run.
final class StageRecorders: Sendable {
    private let all = Mutex<[StageRecorder]>([])
    /// Set by the row once the warm-up is over; lanes then clear their recorder before the next call.
    let generation = Atomic<Int>(0)

    func make() -> StageRecorder {
        let recorder = StageRecorder()
        all.withLock { $0.append(recorder) }
        return recorder
    }

    var recorders: [StageRecorder] { all.withLock { $0 } }
}

final class TimedQueue: JobQueue {
    private let inner: any JobQueue
    private let recorder: StageRecorder
    private let recorders: StageRecorders
    private var generation = 0

    init(_ inner: any JobQueue, recorder: StageRecorder, recorders: StageRecorders) {
        self.inner = inner
        self.recorder = recorder
        self.recorders = recorders
    }

    func reserve(timeout: Duration) throws -> ReservedJob? {
        // The warm-up's timings are dropped by the lane itself, between jobs, so no lock is needed.
        let current = recorders.generation.load(ordering: .relaxed)
        if current != generation {
            generation = current
            recorder.reset()
        }
        let wall0 = BenchClock.wall()
        let cpu0 = BenchClock.threadCPU()
        let job = try inner.reserve(timeout: timeout)
        // An empty reserve is idle time, not work: only reserves that got a job are counted.
        if job != nil {
            recorder.add(.reserve, cpu: BenchClock.threadCPU() &- cpu0, wall: BenchClock.wall() &- wall0)
            recorder.jobStarted()
        }
        return job
    }

    func acknowledge(_ job: ReservedJob, result: [UInt8]?) throws {
        if recorder.sampleResult == nil { recorder.sampleResult = result }
        try recorder.time(.acknowledge) { try inner.acknowledge(job, result: result) }
        recorder.jobFinished()
    }

    func scheduleRetry(_ job: ReservedJob, updated: JobEnvelope, runAt: Date) throws {
        try inner.scheduleRetry(job, updated: updated, runAt: runAt)
        recorder.jobFinished()
    }

    func bury(_ job: ReservedJob, updated: JobEnvelope?, at date: Date) throws {
        try inner.bury(job, updated: updated, at: date)
        recorder.jobFinished()
    }

    func heartbeat(busy: Int) throws { try inner.heartbeat(busy: busy) }
}

final class TimedStore: ReceiptStore {
    private let inner: any ReceiptStore
    private let recorder: StageRecorder

    init(_ inner: any ReceiptStore, recorder: StageRecorder) {
        self.inner = inner
        self.recorder = recorder
    }

    func app(id: UUID) throws -> AppRecord? { try recorder.time(.app) { try inner.app(id: id) } }

    func save(_ record: ValidationRecord) throws -> ReceiptResource { try recorder.time(.save) { try inner.save(record) } }
}

final class TimedVerifier: ReceiptVerifier {
    private let inner: any ReceiptVerifier
    private let recorder: StageRecorder

    init(_ inner: any ReceiptVerifier, recorder: StageRecorder) {
        self.inner = inner
        self.recorder = recorder
    }

    func verify(_ request: VerificationRequest) -> VerificationReport { recorder.time(.verify) { inner.verify(request) } }
}

final class TimedCircuit: OutageCircuit {
    private let inner: any OutageCircuit
    private let recorder: StageRecorder

    init(_ inner: any OutageCircuit, recorder: StageRecorder) {
        self.inner = inner
        self.recorder = recorder
    }

    func permission(now: Date) throws -> CircuitPermission { try recorder.time(.permission) { try inner.permission(now: now) } }

    func record(outage: Bool, now: Date) throws -> CircuitTransition? {
        try recorder.time(.record) { try inner.record(outage: outage, now: now) }
    }

    func record(successes: Int, outages: Int, now: Date) throws -> CircuitTransition? {
        try recorder.time(.record) { try inner.record(successes: successes, outages: outages, now: now) }
    }

    func state(now: Date) throws -> CircuitStatus { try inner.state(now: now) }
}
