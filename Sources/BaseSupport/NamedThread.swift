import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Threads of their own for the loops that live as long as a service (the HTTP engines, the
/// worker's fetcher and committers, the scheduler's loops, the intake's result listener): such a
/// loop blocks for its whole life, which libdispatch's shared pool and the cooperative pool are not
/// for. Each is named, so `top -H`, a debugger and `/proc/<pid>/task/*/comm` say whose it is.
///
/// Linux keeps 15 bytes of a name, so the names are short (`receiptq.fetch`); longer ones are cut.
/// They are set through `/proc/thread-self/comm`: Foundation's `Thread.name` does not reach the
/// kernel on Linux (Swift 6.3: the thread keeps the process's name).
///
/// ```swift
/// // in a Service's run(): returns when the loop does, holding no thread of the caller's meanwhile
/// await NamedThread.run("receiptq.sched") { loop() }
/// ```
public enum NamedThread {
    /// Starts `body` on a new thread named `name` and returns at once.
    public static func start(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            nameCurrentThread(name)
            body()
        }
        thread.start()
    }

    /// Runs `body` on a new thread named `name` and returns when it has returned; the awaiting task
    /// holds no thread meanwhile.
    public static func run(_ name: String, _ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            start(name) {
                body()
                continuation.resume()
            }
        }
    }

    /// Names the calling thread (its first 15 bytes); silently keeps the old name where it cannot.
    public static func nameCurrentThread(_ name: String) {
        let bytes = Array(name.utf8.prefix(15))
        #if os(Linux)
        let file = open("/proc/thread-self/comm", O_WRONLY)
        guard file >= 0 else { return }
        _ = bytes.withUnsafeBufferPointer { write(file, $0.baseAddress, $0.count) }
        close(file)
        #elseif canImport(Darwin)
        _ = pthread_setname_np(String(decoding: bytes, as: UTF8.self))
        #endif
    }
}
