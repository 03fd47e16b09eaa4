import NIOCore
import NIOPosix

/// A task executor on threads of its own, for servers started in the background of a process whose
/// cooperative pool belongs to other work.
///
/// The test run is such a process: Swift Testing runs every test on the cooperative pool, which is
/// only as wide as the machine (two threads here), and a test that computes for seconds without
/// suspending holds one of them. A mock App Store, webhook receiver or `receiptq` API started there
/// with a plain `Task` answers on whatever the pool has left, and two such tests at once kept
/// answers past clients' 30 s timeouts. Tasks that prefer this executor (and their child tasks:
/// every connection's handler) run on its event loops instead, which the kernel schedules like any
/// other thread. `receiptq` itself runs every task on NIO's event loops and does not need it.
public final class ServerThreads: TaskExecutor {
    /// The one set every background server of the process shares.
    public static let shared = ServerThreads(threads: 4)

    private let group: MultiThreadedEventLoopGroup

    /// A set of `threads` event loops that is never shut down (it lives as long as the process).
    public init(threads: Int) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        group.next().execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
