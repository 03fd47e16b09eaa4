import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process of a test, started with `posix_spawn`: the part of Foundation's `Process` the
/// tests use, without its faults on Linux.
///
/// Foundation's `Process.run()` (Swift 6.3) copies 256 bytes of every `/proc/self/fd` entry while
/// it looks for the highest open descriptor, reading past glibc's buffer when an entry sits at
/// its end: an intermittent SIGSEGV that takes the whole test run down with it
/// (swift-corelibs-foundation#5472; seen in full runs here, last in `openssl req` for a TLS test).
/// On Linux it also learns that a child exited from EOF on a socket the child inherits, so a daemon
/// the child leaves behind keeps `waitUntilExit()` waiting, and it leaves every descriptor of the
/// test (database connections, listening sockets) open in the child. A child spawned here gets
/// stdin, stdout and stderr as asked and nothing else.
///
/// ```swift
/// let result = try ChildProcess.run(["openssl", "version"])
/// #expect(result.status == 0)
/// ```
public final class ChildProcess: @unchecked Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// `/dev/null`.
        case null
        /// A pipe to this process: ``input`` (for stdin) or ``output`` (for stdout).
        case pipe
        /// A file, created if needed and appended to.
        case file(String)
        /// Wherever stdout goes (for stderr only).
        case output
    }

    /// How it ended, as `Process` says it.
    public enum TerminationReason: Sendable { case exit, uncaughtSignal }

    /// The child's process id.
    public let processIdentifier: pid_t
    /// The write end of the child's stdin, when it is a ``Stream/pipe``.
    public let input: FileHandle?
    /// The read end of the child's stdout, when it is a ``Stream/pipe``.
    public let output: FileHandle?

    private let lock = NSLock()
    // Guarded by `lock`: the raw wait status once reaped.
    private var waitStatus: Int32?

    /// Starts `arguments`.
    /// - Parameters:
    ///   - arguments: the program and its arguments: a path, or with a nil `environment` also a
    ///     name looked up on `PATH`.
    ///   - environment: the child's environment (nil: this process's).
    ///   - directory: its working directory (nil: this process's).
    ///   - stdin, stdout, stderr: where its standard streams go; stderr cannot be a pipe (a file
    ///     is read after the fact without the risk of two full pipes).
    public init(
        _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil, stdin: Stream = .null,
        stdout: Stream = .null, stderr: Stream = .null
    ) throws {
        precondition(!arguments.isEmpty, "a child needs a program")
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var childEnds: [Int32] = []
        defer { for fd in childEnds { close(fd) } }
        var input: FileHandle?
        var output: FileHandle?
        for (fd, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            switch stream {
            case .null:
                posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, fd, path, fd == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .output:
                precondition(fd == 2, "only stderr can follow stdout")
                posix_spawn_file_actions_adddup2(&actions, 1, 2)
            case .pipe:
                precondition(fd < 2, "stderr cannot be a pipe: give it a file")
                var ends: [Int32] = [-1, -1]
                // Close-on-exec: a child another test spawns meanwhile must not hold this pipe open.
                guard pipe(&ends) == 0 else { throw SpawnError("pipe: errno \(errno)") }
                for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                let (mine, theirs) = fd == 0 ? (ends[1], ends[0]) : (ends[0], ends[1])
                childEnds.append(theirs)
                // dup2 clears close-on-exec on the child's copy.
                posix_spawn_file_actions_adddup2(&actions, theirs, fd)
                let handle = FileHandle(fileDescriptor: mine, closeOnDealloc: true)
                if fd == 0 { input = handle } else { output = handle }
            }
        }
        guard let spawnCloseFrom, spawnCloseFrom(&actions, 3) == 0 else {
            throw SpawnError("posix_spawn file actions failed (glibc ≥ 2.34 needed)")
        }
        if let directory {
            guard let spawnChangeDirectory, spawnChangeDirectory(&actions, directory) == 0 else {
                throw SpawnError("posix_spawn cannot change directory (glibc ≥ 2.29 needed)")
            }
        }
        processIdentifier = try spawnChild(arguments, environment: environment, actions: &actions)
        self.input = input
        self.output = output
    }

    deinit {
        // Reaps it if it has exited; a child still running is the owner's to stop.
        _ = isRunning
    }

    /// Whether it has not exited yet (reaps it when it has).
    public var isRunning: Bool {
        lock.withLock {
            guard waitStatus == nil else { return false }
            var status: Int32 = 0
            let result = waitpid(processIdentifier, &status, WNOHANG)
            if result == processIdentifier { waitStatus = status }
            return result == 0
        }
    }

    /// Sends it SIGTERM.
    public func terminate() { kill(processIdentifier, SIGTERM) }

    /// Blocks until it has exited.
    public func waitUntilExit() {
        lock.withLock {
            guard waitStatus == nil else { return }
            var status: Int32 = 0
            while waitpid(processIdentifier, &status, 0) == -1, errno == EINTR {}
            waitStatus = status
        }
    }

    /// Its exit code, or the signal that ended it (as `Process` reports them); -1 while it runs.
    public var terminationStatus: Int32 {
        guard let status = lock.withLock({ waitStatus }) else { return -1 }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : signal
    }

    /// Whether it exited or a signal ended it.
    public var terminationReason: TerminationReason {
        guard let status = lock.withLock({ waitStatus }) else { return .exit }
        return status & 0x7f == 0 ? .exit : .uncaughtSignal
    }

    /// Runs `arguments` to the end: writes `input` to its stdin, and returns its status (its exit
    /// code, or 128 + the signal that ended it) with what it wrote to stdout (and to stderr,
    /// unless `stderr` is a file).
    public static func run(
        _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil, input: [UInt8]? = nil,
        stderr: Stream = .output
    ) throws -> (status: Int32, output: [UInt8]) {
        let child = try ChildProcess(
            arguments, environment: environment, directory: directory, stdin: input == nil ? .null : .pipe, stdout: .pipe, stderr: stderr)
        if let input, let handle = child.input {
            // From another thread: a child that answers as it reads would otherwise fill its
            // stdout pipe while this thread still writes, and both would wait for ever.
            Thread {
                try? handle.write(contentsOf: input)
                try? handle.close()
            }.start()
        }
        let output = child.output.map { [UInt8]($0.readDataToEndOfFile()) } ?? []
        child.waitUntilExit()
        return (child.terminationReason == .exit ? child.terminationStatus : 128 + child.terminationStatus, output)
    }
}

/// A child could not be started.
public struct SpawnError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Spawns `arguments` with `actions`, as Foundation's `Process` would: every signal at its
/// default disposition and none blocked (a child inherits the calling thread's mask, and
/// libdispatch's threads block signals: a role spawned from one would never see its SIGTERM).
/// - Parameters:
///   - arguments: the program (a path, or a name looked up on `PATH` when `environment` is nil) and
///     its arguments.
///   - environment: the child's environment; nil: this process's, and a `PATH` look-up.
public func spawnChild(_ arguments: [String], environment: [String: String]?, actions: inout posix_spawn_file_actions_t) throws -> pid_t {
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var noSignals = sigset_t()
    sigemptyset(&noSignals)
    var allSignals = sigset_t()
    sigfillset(&allSignals)
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    posix_spawnattr_setsigdefault(&attributes, &allSignals)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    let argv = arguments.map { strdup($0) } + [nil]
    defer { for argument in argv { free(argument) } }
    var pid: pid_t = 0
    let status: Int32
    if let environment {
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for variable in envp { free(variable) } }
        status = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, envp)
    } else {
        status = posix_spawnp(&pid, arguments[0], &actions, &attributes, argv, environ)
    }
    guard status == 0 else { throw SpawnError("cannot start \(arguments[0]): error \(status)") }
    return pid
}

// glibc has both (2.34, 2.29), but its headers hide them from Swift's Glibc module.
public typealias SpawnCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
public typealias SpawnChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
/// `posix_spawn_file_actions_addclosefrom_np`: the child closes every descriptor from the given one up.
public let spawnCloseFrom = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: SpawnCloseFrom.self) }
/// `posix_spawn_file_actions_addchdir_np`: the child starts in the given directory.
public let spawnChangeDirectory = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map {
    unsafeBitCast($0, to: SpawnChangeDirectory.self)
}
