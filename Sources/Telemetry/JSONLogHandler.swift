import Foundation
import Logging
import ReceiptCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A swift-log handler that writes one JSON object per line (`LOG_FORMAT=json`), for log
/// collectors that parse structured lines (Loki, Elasticsearch, CloudWatch, `jq`).
///
/// Each line holds, in this order:
/// - `ts`: the time, RFC 3339 in UTC with milliseconds (`2025-06-01T12:00:00.250Z`);
/// - `level`: `trace`, `debug`, `info`, `notice`, `warning`, `error` or `critical`;
/// - `logger`: the logger's label;
/// - `msg`: the message;
/// - then the metadata as top-level keys, sorted: the handler's (the logger's) metadata, then what
///   the metadata provider adds, then the call's own metadata, each overriding the one before.
///   Keys are kept as they are (`job.id` stays one key, it is not nested); nested metadata values
///   (dictionaries, arrays) become JSON objects and arrays, every other value a JSON string. An
///   error passed as `logger.error("…", error: error)` becomes `error.message` (its description)
///   and `error.type`, as swift-log's `StreamLogHandler` shows it. A metadata key that would
///   shadow `ts`, `level`, `logger` or `msg` is written as `metadata.<key>` instead.
///
/// Strings are escaped as JSON requires (quotes, backslashes, every control character); other
/// characters, non-ASCII included, are written as UTF-8. Each line goes to its ``Sink`` in one
/// call, and the standard sinks write it with one `write(2)` under a process-wide lock, so lines
/// logged from many threads never interleave.
///
/// ```swift
/// LoggingSystem.bootstrap { label in
///     var handler = JSONLogHandler.standardError(label: label)
///     handler.logLevel = .info
///     return handler
/// }
/// ```
public struct JSONLogHandler: LogHandler {
    /// Where lines go: a function called once per line, with the line's bytes and its final `\n`.
    public struct Sink: Sendable {
        private let writeLine: @Sendable ([UInt8]) -> Void

        /// A sink that hands each line to `writeLine` (for tests, or another destination). Lines
        /// may arrive from any thread, concurrently: `writeLine` must be thread-safe.
        public init(_ writeLine: @escaping @Sendable ([UInt8]) -> Void) {
            self.writeLine = writeLine
        }

        /// Hands one line over.
        func emit(_ line: [UInt8]) { writeLine(line) }

        /// The process's standard error.
        public static var standardError: Sink { fileDescriptor(STDERR_FILENO) }

        /// The process's standard output.
        public static var standardOutput: Sink { fileDescriptor(STDOUT_FILENO) }

        /// An open file descriptor, which the sink does not own or close. Every line is written with
        /// one `write(2)` (more only if the kernel takes part of it), under a lock shared by every
        /// file-descriptor sink of the process.
        public static func fileDescriptor(_ descriptor: Int32) -> Sink {
            Sink { line in
                fileLock.withLock { _ in
                    line.withUnsafeBytes { buffer in
                        var offset = 0
                        while offset < buffer.count, let base = buffer.baseAddress {
                            let written = write(descriptor, base + offset, buffer.count - offset)
                            if written > 0 {
                                offset += written
                            } else if written < 0 && errno == EINTR {
                                continue
                            } else {
                                // A closed or full descriptor: a log line is not worth failing the caller.
                                return
                            }
                        }
                    }
                }
            }
        }

        /// Serialises writes of every file-descriptor sink: lines from many threads stay whole.
        private static let fileLock = Mutex(())
    }

    /// The logger's label, written as `logger`.
    public let label: String
    /// The least severe level written.
    public var logLevel: Logger.Level = .info
    /// The logger's own metadata (`logger[metadataKey:]`), written on every line.
    public var metadata: Logger.Metadata = [:]
    /// Adds metadata to every line when it is written (task-local context such as a request id).
    public var metadataProvider: Logger.MetadataProvider?

    private let sink: Sink
    private let now: @Sendable () -> Date

    /// Creates a handler.
    /// - Parameters:
    ///   - label: the logger's label.
    ///   - sink: where lines go (default: standard error).
    ///   - metadataProvider: adds metadata at each log call (default: the one given to `LoggingSystem.bootstrap`).
    ///   - now: the clock read for `ts` (tests fix it).
    public init(
        label: String, sink: Sink = .standardError, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.label = label
        self.sink = sink
        self.metadataProvider = metadataProvider
        self.now = now
    }

    /// A handler writing to standard error, the signature `LoggingSystem.bootstrap` takes.
    public static func standardError(label: String, metadataProvider: Logger.MetadataProvider?) -> JSONLogHandler {
        JSONLogHandler(label: label, sink: .standardError, metadataProvider: metadataProvider)
    }

    /// A handler writing to standard error with the bootstrap's metadata provider.
    public static func standardError(label: String) -> JSONLogHandler {
        JSONLogHandler(label: label, sink: .standardError)
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty {
            merged.merge(provided) { _, provided in provided }
        }
        if let explicit = event.metadata, !explicit.isEmpty {
            merged.merge(explicit) { _, explicit in explicit }
        }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        sink.emit(Self.line(time: now(), level: event.level, label: label, message: event.message.description, metadata: merged))
    }

    /// The keys every line starts with; metadata may not take them.
    private static let reservedKeys: Set<String> = ["ts", "level", "logger", "msg"]

    /// One rendered line, `\n` included. The JSON is written by ReceiptCore's ``JSONWriter``, the
    /// writer of the API's documents: one escaper for every JSON receiptq produces.
    static func line(time: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata) -> [UInt8] {
        var writer = JSONWriter(capacity: 128 + message.utf8.count + metadata.count * 32)
        var timestamp: [UInt8] = []
        appendTimestamp(time, to: &timestamp)
        writer.openObject()
        writer.member("ts", String(decoding: timestamp, as: UTF8.self))
        writer.member("level", level.rawValue)
        writer.member("logger", label)
        writer.member("msg", message)
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            writer.key(reservedKeys.contains(key) ? "metadata.\(key)" : key)
            append(value, to: &writer)
        }
        writer.closeObject()
        return writer.bytes + [UInt8(ascii: "\n")]
    }

    /// A metadata value: strings as JSON strings, dictionaries as objects (keys sorted), arrays as arrays.
    static func append(_ value: Logger.Metadata.Value, to writer: inout JSONWriter) {
        switch value {
        case .string(let text):
            writer.string(text)
        case .stringConvertible(let convertible):
            writer.string(convertible.description)
        case .dictionary(let dictionary):
            writer.openObject()
            for (key, nested) in dictionary.sorted(by: { $0.key < $1.key }) {
                writer.key(key)
                append(nested, to: &writer)
            }
            writer.closeObject()
        case .array(let array):
            writer.openArray()
            for nested in array { append(nested, to: &writer) }
            writer.closeArray()
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, in UTC.
    static func appendTimestamp(_ time: Date, to out: inout [UInt8]) {
        // Through whole microseconds first: 1_700_000_000.123 × 1000 is 1_700_000_000_122.99…
        let microseconds = Int64((time.timeIntervalSince1970 * 1_000_000).rounded())
        let milliseconds = microseconds.floorDivided(by: 1000)
        var seconds = time_t(milliseconds.floorDivided(by: 1000))
        let millis = Int(milliseconds - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(Int(parts.tm_year) + 1900, 4)
        out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2)
        out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2)
        out.append(UInt8(ascii: "T"))
        digits(Int(parts.tm_hour), 2)
        out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2)
        out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2)
        out.append(UInt8(ascii: "."))
        digits(millis, 3)
        out.append(UInt8(ascii: "Z"))
    }
}

extension Int64 {
    /// Division rounding towards negative infinity (times before 1970 keep positive milliseconds).
    fileprivate func floorDivided(by divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }
}
