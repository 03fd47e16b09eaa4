internal import COpenSSL

/// A failed OpenSSL operation, with OpenSSL's thread-local error queue drained into ``message``.
///
/// Equality compares ``code`` only. Messages hold OpenSSL's own reason strings, never key material
/// or input bytes.
public struct OpenSSLError: Error, CustomStringConvertible, Equatable {
    /// A bounded classification, usable as a metric label or dead-letter code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case decode
            case keyGeneration = "key_generation"
            case certificate, signing, verification, other
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// PEM/DER input could not be parsed.
        public static let decode = Code(.decode)
        /// A key could not be generated.
        public static let keyGeneration = Code(.keyGeneration)
        /// A certificate could not be built, signed or encoded.
        public static let certificate = Code(.certificate)
        /// A PKCS#7 or raw signature could not be produced.
        public static let signing = Code(.signing)
        /// A verification could not run (not "the signature is wrong": that is a result, not an error).
        public static let verification = Code(.verification)
        /// Anything else, e.g. an allocation failure.
        public static let other = Code(.other)

        /// A short snake_case name, e.g. `decode`.
        public var description: String { value.rawValue }
    }

    /// The classification of this failure.
    public var code: Code
    /// What we tried, then OpenSSL's queued reason strings, e.g. `PEM_read_bio_X509: … no start line`.
    public var message: String

    /// Creates an error; the façade uses ``drain(_:_:)`` so that the queue is always emptied.
    public init(_ code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// `OpenSSLError(decode): …`.
    public var description: String { "OpenSSLError(\(code)): \(message)" }

    public static func == (lhs: OpenSSLError, rhs: OpenSSLError) -> Bool {
        lhs.code == rhs.code
    }

    /// The one place OpenSSL failures become ``OpenSSLError``s. It empties this thread's error
    /// queue, so a stale entry can never be blamed on a later, unrelated call.
    static func drain(_ code: Code, _ operation: String) -> OpenSSLError {
        let reasons = drainQueue()
        return OpenSSLError(code, message: reasons.isEmpty ? operation : "\(operation): \(reasons.joined(separator: "; "))")
    }

    /// Reads and clears the queue; returns one string per entry (capped, so a flood stays bounded).
    @discardableResult
    static func drainQueue() -> [String] {
        var reasons: [String] = []
        while case let error = ERR_get_error(), error != 0 {
            guard reasons.count < 8 else { continue }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(error, &buffer, buffer.count)
            reasons.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return reasons
    }
}
