import Foundation
import Synchronization

/// A run's simulated time shared with a process of its own (the worker ``Faults/workerKilled``
/// kills): a file of 8 bytes, the simulated clock's lead over the machine's wall clock in
/// microseconds (a little-endian `Int64`), which the parent's ``SimulatedClock`` rewrites with one
/// `pwrite` at each jump and the child reads with one `pread` each time it asks the time. Between
/// jumps both run at the machine's pace, so the lead alone is the whole clock; an 8-byte, aligned
/// write within one page is never seen half done.
public enum ClockFile {
    /// The parent's end: creates (or truncates) the file and writes the lead.
    public final class Writer: Sendable {
        private let descriptor: Int32

        /// Creates the file at `path`, readable by this user only.
        public init(path: String) throws {
            descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw ClockFileError.cannotOpen(path: path, errno: errno) }
        }

        deinit { close(descriptor) }

        /// Publishes `simulated` as the time it is at the machine's `wall` time.
        public func publish(_ simulated: Date, at wall: Date = Date()) {
            var lead = Int64(((simulated.timeIntervalSince1970 - wall.timeIntervalSince1970) * 1_000_000).rounded()).littleEndian
            // A failed write leaves the last lead: the child's clock lags the jump, it does not break.
            _ = withUnsafeBytes(of: &lead) { pwrite(descriptor, $0.baseAddress, 8, 0) }
        }
    }

    /// The child's end: the simulated time, as the parent last published it.
    public final class Reader: Sendable {
        private let descriptor: Int32
        /// The last lead read, kept for a read that fails (never expected on a local file).
        private let lastLead = Atomic<Int64>(0)

        /// Opens the file at `path`, which the parent has written.
        public init(path: String) throws {
            descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { throw ClockFileError.cannotOpen(path: path, errno: errno) }
            guard read() != nil else {
                close(descriptor)
                throw ClockFileError.unpublished(path: path)
            }
        }

        deinit { close(descriptor) }

        /// The simulated time now.
        public func now() -> Date {
            let lead = read() ?? lastLead.load(ordering: .relaxed)
            return Date().addingTimeInterval(Double(lead) / 1_000_000)
        }

        /// The clock as the `now` closure services take.
        public var closure: @Sendable () -> Date { { self.now() } }

        private func read() -> Int64? {
            var lead: Int64 = 0
            let count = withUnsafeMutableBytes(of: &lead) { pread(descriptor, $0.baseAddress, 8, 0) }
            guard count == 8 else { return nil }
            lastLead.store(Int64(littleEndian: lead), ordering: .relaxed)
            return Int64(littleEndian: lead)
        }
    }
}

/// Why a clock file could not be used.
public enum ClockFileError: Error, CustomStringConvertible {
    case cannotOpen(path: String, errno: Int32)
    /// The file holds no lead yet (the parent publishes before it starts the child).
    case unpublished(path: String)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let errno): "cannot open the clock file \(path): \(String(cString: strerror(errno)))"
        case .unpublished(let path): "the clock file \(path) holds no time yet"
        }
    }
}
