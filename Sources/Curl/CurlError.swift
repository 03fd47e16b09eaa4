internal import CCurl

/// A failed libcurl transfer. HTTP error statuses are not errors: they arrive as ``HTTPResponse``.
///
/// Equality compares ``code`` only, so `catch let error as CurlError where error == .init(.timeout)`
/// style checks and `#expect(error.code == .timeout)` are stable across libcurl versions.
public struct CurlError: Error, CustomStringConvertible, Equatable {
    /// A bounded classification of libcurl failures, usable as a metric label or dead-letter code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case couldNotResolve = "could_not_resolve"
            case couldNotConnect = "could_not_connect"
            case timeout
            case tls
            case sendFailed = "send_failed"
            case receiveFailed = "receive_failed"
            case responseTooLarge = "response_too_large"
            case unsupportedProtocol = "unsupported_protocol"
            case invalidRequest = "invalid_request"
            case cancelled
            case other
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// DNS resolution failed (`CURLE_COULDNT_RESOLVE_HOST`/`_PROXY`).
        public static let couldNotResolve = Code(.couldNotResolve)
        /// TCP connection failed, e.g. refused (`CURLE_COULDNT_CONNECT`).
        public static let couldNotConnect = Code(.couldNotConnect)
        /// Connect or total timeout elapsed (`CURLE_OPERATION_TIMEDOUT`).
        public static let timeout = Code(.timeout)
        /// Any TLS failure, including peer certificate or host name verification.
        public static let tls = Code(.tls)
        /// Sending the request failed (`CURLE_SEND_ERROR`).
        public static let sendFailed = Code(.sendFailed)
        /// Receiving the response failed or the server closed early.
        public static let receiveFailed = Code(.receiveFailed)
        /// The body exceeded ``CurlOptions/maxResponseBytes``.
        public static let responseTooLarge = Code(.responseTooLarge)
        /// The URL's scheme is not `http` or `https` (`CURLE_UNSUPPORTED_PROTOCOL`).
        public static let unsupportedProtocol = Code(.unsupportedProtocol)
        /// The request was malformed: a bad URL, or CR/LF in a header.
        public static let invalidRequest = Code(.invalidRequest)
        /// The request was withdrawn before it completed: ``CurlMulti`` shut down or the caller's
        /// task was cancelled.
        public static let cancelled = Code(.cancelled)
        /// Anything else; ``CurlError/curlCode`` says what.
        public static let other = Code(.other)

        /// A short snake_case name, e.g. `timeout`.
        public var description: String { value.rawValue }
    }

    /// The classification of this failure.
    public var code: Code
    /// The raw `CURLE_*` number (0 when the failure was detected before libcurl ran).
    public var curlCode: Int
    /// `curl_easy_strerror` text plus libcurl's error buffer, with the URL's query redacted;
    /// never the request body.
    public var message: String

    /// Creates an error; tests and mocks use this, ``CurlEasy`` maps libcurl codes itself.
    public init(_ code: Code, curlCode: Int = 0, message: String = "") {
        self.code = code
        self.curlCode = curlCode
        self.message = message
    }

    /// True for connect and total timeouts.
    public var isTimeout: Bool { code == .timeout }

    /// `CurlError(timeout, curl 28): …`; carries no URL query and no body.
    public var description: String {
        "CurlError(\(code), curl \(curlCode)): \(message)"
    }

    public static func == (lhs: CurlError, rhs: CurlError) -> Bool {
        lhs.code == rhs.code
    }

    /// The one place libcurl result codes become ``CurlError``s.
    ///
    /// - Parameters:
    ///   - result: the failed `CURLcode`.
    ///   - detail: the handle's `CURLOPT_ERRORBUFFER` text, if any.
    ///   - bodyTooLarge: whether our write callback aborted because of the size limit, which
    ///     libcurl reports only as a generic write error.
    ///   - redacting: the URL's query (after `?`), replaced in messages because it may hold secrets.
    static func map(_ result: CURLcode, detail: String?, bodyTooLarge: Bool, redacting query: Substring?) -> CurlError {
        let code: Code
        switch result {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            code = .couldNotResolve
        case CURLE_COULDNT_CONNECT:
            code = .couldNotConnect
        case CURLE_OPERATION_TIMEDOUT:
            code = .timeout
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
            CURLE_SSL_CIPHER, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED,
            CURLE_SSL_ENGINE_INITFAILED, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_SHUTDOWN_FAILED,
            CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH,
            CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED:
            code = .tls
        case CURLE_SEND_ERROR:
            code = .sendFailed
        case CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_HTTP2, CURLE_HTTP2_STREAM,
            CURLE_WEIRD_SERVER_REPLY:
            code = .receiveFailed
        case CURLE_FILESIZE_EXCEEDED:
            code = .responseTooLarge
        case CURLE_WRITE_ERROR where bodyTooLarge:
            code = .responseTooLarge
        case CURLE_UNSUPPORTED_PROTOCOL:
            code = .unsupportedProtocol
        case CURLE_URL_MALFORMAT:
            code = .invalidRequest
        default:
            code = .other
        }
        var message = curl_easy_strerror(result).map { String(cString: $0) } ?? "libcurl error"
        if let detail, !detail.isEmpty {
            message += ": " + detail
        }
        if let query, !query.isEmpty {
            message = message.replacingOccurrences(of: query, with: "<redacted>")
        }
        return CurlError(code, curlCode: Int(result.rawValue), message: message)
    }

    /// The one place multi-interface result codes become ``CurlError``s: every `CURLM_*` failure
    /// (out of memory, a bad handle, an internal error) is a bug or exhaustion, so it is `.other`.
    /// ``curlCode`` stays 0 because it holds `CURLE_*` numbers only; the `CURLM_*` one goes in the message.
    static func map(multi result: CURLMcode) -> CurlError {
        let text = curl_multi_strerror(result).map { String(cString: $0) } ?? "libcurl multi error"
        return CurlError(.other, message: "\(text) (CURLM \(result.rawValue))")
    }
}

extension String {
    // Avoids importing Foundation into the façade for one call.
    fileprivate func replacingOccurrences(of target: Substring, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var result = ""
        var rest = self[...]
        while let range = rest.firstRange(of: target) {
            result += rest[..<range.lowerBound]
            result += replacement
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}
