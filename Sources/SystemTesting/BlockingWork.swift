import Dispatch
import Testing

/// Runs a test (or every test of a suite) off Swift concurrency's cooperative pool, a few such tests
/// at a time: for tests that block a thread (libpq, hiredis and libcurl's easy calls, child
/// processes, semaphores, deliberately slow servers).
///
/// Why: the cooperative pool has one thread per core, two on our machines, and Swift Testing runs
/// every test body there, synchronous ones included. Two tests blocked in a `read` or a
/// `curl_easy_perform` held both threads: every other test waited (pure parsing suites reported
/// "passed after 17 s"), and so did the in-process servers' handlers, which resume on the same
/// pool, while their clients timed out (see Tests/README.md). Under this trait a blocked test
/// blocks a thread of ``BlockingWorkExecutor`` instead.
///
/// The pool was also what limited how many tests ran at once: unlimited, every integration suite
/// started together (400 threads on two cores). So at most ``BlockingWorkTrait/concurrentTests``
/// such tests run at a time (`RECEIPTQ_TEST_CONCURRENCY`, default 6); the others wait without
/// holding a thread.
///
/// ```swift
/// @Suite("Libpq queries", .blockingWork)
/// struct LibpqTests { … }
/// ```
public struct BlockingWorkTrait: TestTrait, SuiteTrait, TestScoping {
    /// How many tests under this trait run at once.
    public static let concurrentTests: Int = {
        let text = ProcessEnvironment.value("RECEIPTQ_TEST_CONCURRENCY") ?? ""
        return Int(text).map { max(1, $0) } ?? 6
    }()

    private static let permits = AsyncPermits(concurrentTests)

    /// Applied to each test of a suite.
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // The suite's own scope only passes through: its tests take a permit each.
        guard testCase != nil else { return try await function() }
        await Self.permits.acquire()
        defer { Task { await Self.permits.release() } }
        try await withTaskExecutorPreference(BlockingWorkExecutor.shared) { try await function() }
    }
}

extension Trait where Self == BlockingWorkTrait {
    /// The test blocks threads: run it off the cooperative pool (``BlockingWorkTrait``).
    public static var blockingWork: Self { BlockingWorkTrait() }
}

/// A task executor whose jobs run on a concurrent dispatch queue of its own. Such a queue targets
/// libdispatch's overcommit pool, which starts another thread when the running ones block, so a
/// job that blocks holds up only itself (and a test waiting on work of its own never deadlocks).
public final class BlockingWorkExecutor: TaskExecutor {
    /// The one executor every ``BlockingWorkTrait`` test runs on.
    public static let shared = BlockingWorkExecutor()

    private let queue = DispatchQueue(label: "receiptq.tests.blocking-work", attributes: .concurrent)

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }
}

/// A counting semaphore whose waiters suspend instead of blocking a thread.
actor AsyncPermits {
    private var available: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(_ count: Int) { available = count }

    func acquire() async {
        if available > 0 {
            available -= 1
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    func release() {
        if waiters.isEmpty {
            available += 1
        } else {
            waiters.removeFirst().resume()
        }
    }
}
