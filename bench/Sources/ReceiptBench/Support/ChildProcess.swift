import Foundation
import ReceiptTesting
import Synchronization

/// A process the bench starts (the worker, the mock App Store, perf), its stdout and stderr kept in
/// a log file. Spawned by ReceiptTesting's `ChildProcess` (posix_spawn), not Foundation's `Process`,
/// whose `run()` crashes now and then reading this process's descriptor list
/// (swift-corelibs-foundation#5472) and leaves every descriptor of the bench open in the child.
final class ChildProcess {
    let child: ReceiptTesting.ChildProcess
    let logURL: URL
    let label: String

    init(executable: URL, arguments: [String], environment: [String: String], label: String, logDirectory: URL) throws {
        self.label = label
        logURL = logDirectory.appendingPathComponent("\(label).log")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        child = try ReceiptTesting.ChildProcess(
            [executable.path] + arguments, environment: environment, stdout: .file(logURL.path), stderr: .output)
    }

    var pid: Int32 { child.processIdentifier }
    var isRunning: Bool { child.isRunning }

    /// Blocks until it has exited.
    func waitUntilExit() { child.waitUntilExit() }

    /// SIGTERM (graceful), then SIGKILL after `grace`; returns the exit status, or nil if it had to be killed.
    @discardableResult
    func stop(grace: Double = 15) -> Int32? {
        guard child.isRunning else { return child.terminationStatus }
        child.terminate()
        let deadline = Date().addingTimeInterval(grace)
        while child.isRunning, Date() < deadline { usleep(20_000) }
        guard !child.isRunning else {
            kill(pid, SIGKILL)
            child.waitUntilExit()
            return nil
        }
        return child.terminationStatus
    }

    /// The last lines of its output, for error messages.
    func logTail(lines: Int = 15) -> String {
        guard let text = try? String(contentsOf: logURL, encoding: .utf8) else { return "(no log)" }
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }

    /// Lines of its output matching `needle`, counted (e.g. repeated lane errors).
    func logCount(_ needle: String) -> Int {
        guard let text = try? String(contentsOf: logURL, encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").filter { $0.contains(needle) }.count
    }

    /// Runs a command to completion and returns its status and output (stdout + stderr); killed
    /// after `timeout` seconds.
    static func run(_ executable: String, _ arguments: [String], timeout: Double = 120) -> (status: Int32, output: String) {
        let child: ReceiptTesting.ChildProcess
        do {
            child = try ReceiptTesting.ChildProcess([executable] + arguments, stdout: .pipe, stderr: .output)
        } catch {
            return (-1, "\(error)")
        }
        guard let output = child.output else { return (-1, "no output pipe") }
        let reader = OutputReader(output)
        let deadline = Date().addingTimeInterval(timeout)
        while child.isRunning, Date() < deadline { usleep(20_000) }
        if child.isRunning { kill(child.processIdentifier, SIGKILL) }
        child.waitUntilExit()
        return (child.terminationStatus, reader.finish())
    }

    /// Finds `name` on PATH (or next to the swift toolchain), nil when absent.
    static func which(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":").map(String.init) + ["/opt/swift/usr/bin"] {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}

/// Drains a pipe on its own thread, so a chatty child never blocks on a full pipe.
private final class OutputReader: Sendable {
    private let data = Mutex(Data())
    private let done = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        Thread { [self] in
            let all = handle.readDataToEndOfFile()
            data.withLock { $0 = all }
            done.signal()
        }.start()
    }

    func finish() -> String {
        done.wait()
        return String(decoding: data.withLock { $0 }, as: UTF8.self)
    }
}

enum Network {
    /// Waits until something accepts connections on 127.0.0.1:`port`.
    static func waitForListener(port: Int, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = UInt16(port).bigEndian
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            close(socket)
            if connected { return true }
            usleep(50_000)
        }
        return false
    }
}

/// Runs async work from the bench's synchronous rows and waits for it.
func blockingAwait<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let box = ResultBox<T>()
    Task {
        do { box.finish(.success(try await body())) } catch { box.finish(.failure(error)) }
    }
    return try box.wait()
}

private final class ResultBox<T: Sendable>: Sendable {
    private let result = Mutex<Result<T, any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    func finish(_ value: Result<T, any Error>) {
        result.withLock { $0 = value }
        done.signal()
    }

    func wait() throws -> T {
        done.wait()
        return try result.withLock { $0! }.get()
    }
}

/// Sleeps `seconds` on this thread.
func pause(seconds: Double) {
    guard seconds > 0 else { return }
    usleep(UInt32(min(seconds, 4_000) * 1_000_000))
}
