/// One HTTP request for ``CurlEasy`` or ``HTTPClient``.
public struct HTTPRequest: Sendable {
    /// The method, e.g. `"GET"` or `"POST"`; anything else is sent as a custom request method.
    public var method: String
    /// The absolute `http://` or `https://` URL; other schemes are refused.
    public var url: String
    /// Request headers in order; names and values must not contain CR or LF.
    public var headers: [(name: String, value: String)]
    /// The request body; sent for any method when non-empty, always for `POST`.
    public var body: [UInt8]

    /// Creates a request; a `GET` with no headers and no body unless told otherwise.
    public init(
        method: String = "GET",
        url: String,
        headers: [(name: String, value: String)] = [],
        body: [UInt8] = []
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// A complete HTTP response: any status, including 4xx and 5xx, is a response, not an error.
public struct HTTPResponse: Sendable {
    /// The status code of the final response (interim `100 Continue` responses are skipped).
    public var status: Int
    /// Header fields of the final response, in the order received.
    public var headers: [(name: String, value: String)]
    /// The body bytes, at most ``CurlOptions/maxResponseBytes``.
    public var body: [UInt8]
    /// Total transfer time as libcurl measured it (`CURLINFO_TOTAL_TIME_T`).
    public var totalTime: Duration
    /// The HTTP version used: `"1.0"`, `"1.1"`, `"2"` or `"3"`; nil if libcurl did not say.
    public var httpVersion: String?

    /// Creates a response; tests and mocks use this, libcurl fills the rest.
    public init(
        status: Int,
        headers: [(name: String, value: String)] = [],
        body: [UInt8] = [],
        totalTime: Duration = .zero,
        httpVersion: String? = nil
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.totalTime = totalTime
        self.httpVersion = httpVersion
    }

    /// The first value of header `name`, compared case-insensitively as HTTP requires.
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}

/// Settings fixed for the lifetime of one ``CurlEasy`` (and every lane of an ``HTTPClient``).
///
/// TLS peer and host verification are always on; there is deliberately no option to turn them off.
public struct CurlOptions: Sendable {
    /// HTTP versions libcurl may negotiate.
    public enum HTTPVersion: Sendable, Equatable {
        /// HTTP/1.1 only.
        case http1_1
        /// HTTP/2 over TLS via ALPN, HTTP/1.1 for plain `http://` (`CURL_HTTP_VERSION_2TLS`).
        /// Prior-knowledge h2c is not offered: libcurl 7.88 cannot multiplex it.
        case http2TLS
    }

    /// Time allowed for DNS, TCP and TLS set-up (`CURLOPT_CONNECTTIMEOUT_MS`).
    public var connectTimeout: Duration = .seconds(5)
    /// Time allowed for the whole transfer, connection included (`CURLOPT_TIMEOUT_MS`).
    public var requestTimeout: Duration = .seconds(30)
    /// Path of a PEM CA bundle to trust instead of the system bundle.
    public var caInfo: String? = nil
    /// Which HTTP version to negotiate.
    public var httpVersion: HTTPVersion = .http1_1
    /// The `User-Agent` header sent with every request.
    public var userAgent: String = "receiptq/0.1"
    /// Larger response bodies abort the transfer with ``CurlError/Code/responseTooLarge``.
    public var maxResponseBytes: Int = 4 << 20
    /// Refuse to connect to loopback, private, link-local and other non-public addresses, checked
    /// on the address libcurl resolved, right before it connects (so a DNS answer that changes
    /// between a check and the request cannot sneak past): for URLs a customer chose.
    public var publicAddressesOnly: Bool = false

    /// Creates options with the defaults above.
    public init() {}
}
