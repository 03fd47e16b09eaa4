import Logging
import Synchronization

/// Counts what services log, by message: the observable a test waits on when the only sign that a
/// service met an outage is its warning ("Re-poll step failed", "Worker fetch error").
///
/// ```swift
/// let recorder = LogRecorder()
/// let logger = recorder.logger(label: "it.scheduler")
/// let before = recorder.count("Re-poll step failed")
/// // … stop Postgres …
/// #expect(try await eventually { recorder.count("Re-poll step failed") > before })
/// ```
public final class LogRecorder: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    public init() {}

    /// How many times `message` was logged (at `recording` level or above).
    public func count(_ message: String) -> Int { counts.withLock { $0[message] ?? 0 } }

    fileprivate func record(_ message: String) { counts.withLock { $0[message, default: 0] += 1 } }

    /// A logger that records every message at `recording` or above, and prints those at `printing`
    /// or above to stderr as before (`.critical`: almost nothing). Do not set its `logLevel`
    /// afterwards: that would set both handlers'.
    public func logger(label: String, recording: Logger.Level = .warning, printing: Logger.Level = .critical) -> Logger {
        Logger(label: label) { label in
            var stream = StreamLogHandler.standardError(label: label)
            stream.logLevel = printing
            var recorder = RecordingLogHandler(recorder: self)
            recorder.logLevel = recording
            return MultiplexLogHandler([stream, recorder])
        }
    }
}

private struct RecordingLogHandler: LogHandler {
    let recorder: LogRecorder
    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) { recorder.record("\(event.message)") }
}
