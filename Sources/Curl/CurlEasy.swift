internal import CCurl

#if canImport(Glibc)
import Glibc
#endif

/// One libcurl easy handle, reused across requests so connections (and TLS sessions) stay alive.
///
/// **Not thread-safe**: libcurl forbids using one easy handle from two threads at once. Confine each
/// instance to one serial `DispatchQueue` (as ``HTTPClient`` does) or one thread; the compiler
/// enforces this by making the type non-`Sendable`. ``perform(_:)`` blocks the calling thread, so
/// never call it from the Swift concurrency pool; use ``HTTPClient`` there.
///
/// Protocols are restricted to `http` and `https`, redirects are never followed, TLS peer and host
/// verification are always on, and `SIGALRM`-based DNS timeouts are disabled (`CURLOPT_NOSIGNAL`)
/// because signals are unsafe in a multi-threaded server.
public final class CurlEasy {
    /// The libcurl version line, e.g. `libcurl/7.88.1 OpenSSL/3.0.…`.
    public static var version: String { CurlGlobal.version }

    private let easy: EasyHandle

    /// How many new connections the last ``perform(_:)`` opened (`CURLINFO_NUM_CONNECTS`):
    /// 0 when it reused a kept-alive connection.
    public private(set) var lastNewConnections: Int = 0

    /// Creates a handle with `options` applied once; only per-request options change later.
    ///
    /// - Throws: ``CurlError`` when libcurl cannot initialise or rejects an option.
    public init(options: CurlOptions) throws {
        easy = try EasyHandle(options: options)
    }

    /// Performs `request` synchronously on the calling thread and returns the final response.
    ///
    /// Every HTTP status is a response. Options set here (URL, method, headers, body) are re-set on
    /// each call; `curl_easy_reset` is not used because it would drop the handle-wide options.
    ///
    /// - Throws: ``CurlError`` for transport failures, timeouts, TLS failures, oversized bodies and
    ///   non-http(s) URLs.
    public func perform(_ request: HTTPRequest) throws -> HTTPResponse {
        lastNewConnections = 0
        try easy.prepare(request)
        let result = easy.finish(curl_easy_perform(easy.raw))
        lastNewConnections = easy.newConnections
        return try result.get()
    }
}

@available(*, unavailable)
extension CurlEasy: Sendable {}

/// One configured libcurl easy handle and the state of its current transfer; the part of a
/// transfer that ``CurlEasy`` (blocking, one at a time) and ``CurlMulti`` (many on one engine
/// thread) share, so both apply the same options, security rules and error mapping.
///
/// Not thread-safe: the owner confines it to one thread or serial queue. A transfer is
/// ``prepare(_:)``, then either `curl_easy_perform` or a multi handle runs it, then exactly one
/// ``finish(_:)`` or ``abandon()`` releases what the transfer needed.
final class EasyHandle {
    /// The `CURL *`; only the owner's thread may pass it to libcurl.
    let raw: UnsafeMutableRawPointer
    private let options: CurlOptions
    // Callback targets and the error buffer must outlive every transfer, so the handle owns them.
    private let sink: ResponseSink
    private let errorBuffer: UnsafeMutablePointer<CChar>
    // Per-transfer state, set by prepare(_:) and released by finish(_:)/abandon(): libcurl reads the
    // header list and the copied body while the transfer runs, and no longer.
    private var headerList: UnsafeMutablePointer<curl_slist>? = nil
    private var postedBody = false
    private var query: Substring? = nil

    /// How many new connections the last finished transfer opened (`CURLINFO_NUM_CONNECTS`).
    private(set) var newConnections = 0

    /// Creates a handle with `options` applied once.
    ///
    /// - Parameters:
    ///   - options: the handle-wide settings.
    ///   - waitForMultiplexing: sets `CURLOPT_PIPEWAIT`, so that inside a multi handle a transfer
    ///     waits for a connection still being set up to offer HTTP/2 instead of opening another.
    /// - Throws: ``CurlError`` when libcurl cannot initialise or rejects an option.
    init(options: CurlOptions, waitForMultiplexing: Bool = false) throws {
        CurlGlobal.initialize()
        guard CurlGlobal.succeeded, let handle = curl_easy_init() else {
            throw CurlError(.other, message: "curl_easy_init failed")
        }
        self.raw = handle
        self.options = options
        self.sink = ResponseSink(limit: options.maxResponseBytes)
        self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        // deinit runs if a later setopt throws, so the handle is never leaked.
        try configure()
        if waitForMultiplexing {
            try set(CURLOPT_PIPEWAIT, 1)
        }
    }

    deinit {
        releaseTransfer()
        curl_easy_cleanup(raw)
        errorBuffer.deallocate()
    }

    private func configure() throws {
        try set(CURLOPT_NOSIGNAL, 1)
        // Only http(s), for the request and for any redirect, so a hostile URL or Location header
        // cannot reach file://, ftp://, gopher:// and friends.
        try set(CURLOPT_PROTOCOLS_STR, "http,https")
        try set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        try set(CURLOPT_FOLLOWLOCATION, 0)
        // These are libcurl's defaults; set explicitly so a future default change cannot weaken them.
        try set(CURLOPT_SSL_VERIFYPEER, 1)
        try set(CURLOPT_SSL_VERIFYHOST, 2)
        if let caInfo = options.caInfo {
            try set(CURLOPT_CAINFO, caInfo)
        }
        try set(CURLOPT_TCP_KEEPALIVE, 1)
        try set(CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(options.connectTimeout))
        try set(CURLOPT_TIMEOUT_MS, Self.milliseconds(options.requestTimeout))
        switch options.httpVersion {
        case .http1_1: try set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
        case .http2TLS: try set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        }
        try set(CURLOPT_USERAGENT, options.userAgent)
        // Fails fast when Content-Length announces too much; the write callback covers chunked bodies.
        try check(ccurl_easy_setopt_off_t(raw, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(options.maxResponseBytes)))
        try check(ccurl_easy_setopt_ptr(raw, CURLOPT_ERRORBUFFER, errorBuffer))

        if options.publicAddressesOnly {
            try check(ccurl_easy_setopt_opensocket_callback(raw, curlOpenPublicSocket))
            // A proxy from the environment would be the address checked instead of the target's.
            try set(CURLOPT_NOPROXY, "*")
        }

        let context = Unmanaged.passUnretained(sink).toOpaque()
        try check(ccurl_easy_setopt_write_callback(raw, CURLOPT_WRITEFUNCTION, curlWriteBody))
        try check(ccurl_easy_setopt_ptr(raw, CURLOPT_WRITEDATA, context))
        try check(ccurl_easy_setopt_write_callback(raw, CURLOPT_HEADERFUNCTION, curlWriteHeader))
        try check(ccurl_easy_setopt_ptr(raw, CURLOPT_HEADERDATA, context))
    }

    /// Sets the per-request options (URL, method, body, headers) for the next transfer.
    ///
    /// `curl_easy_reset` is not used because it would drop the handle-wide options.
    ///
    /// - Throws: ``CurlError`` for a bad method, CR/LF in a header or a rejected option; the
    ///   transfer state is released, so the handle can be reused at once.
    func prepare(_ request: HTTPRequest) throws {
        releaseTransfer()
        errorBuffer[0] = 0
        query = request.url.firstIndex(of: "?").map { request.url[$0...].dropFirst() }
        do {
            try set(CURLOPT_URL, request.url)
            try applyMethodAndBody(request)
            headerList = try makeHeaderList(request)
            try check(ccurl_easy_setopt_ptr(raw, CURLOPT_HTTPHEADER, headerList))
        } catch {
            releaseTransfer()
            throw error
        }
    }

    /// Reads the outcome of the transfer that ended with `result`, then releases its state.
    func finish(_ result: CURLcode) -> Result<HTTPResponse, CurlError> {
        defer { releaseTransfer() }
        var connects = 0
        newConnections = ccurl_easy_getinfo_long(raw, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK ? connects : 0
        guard result == CURLE_OK else {
            return .failure(CurlError.map(result, detail: errorText(), bodyTooLarge: sink.tooLarge, redacting: query))
        }
        do {
            var status = 0
            try check(ccurl_easy_getinfo_long(raw, CURLINFO_RESPONSE_CODE, &status))
            var micros: curl_off_t = 0
            try check(ccurl_easy_getinfo_off_t(raw, CURLINFO_TOTAL_TIME_T, &micros))
            var version = 0
            try check(ccurl_easy_getinfo_long(raw, CURLINFO_HTTP_VERSION, &version))
            let (headers, body) = sink.take()
            return .success(
                HTTPResponse(
                    status: status,
                    headers: headers,
                    body: body,
                    totalTime: .microseconds(Int64(micros)),
                    httpVersion: Self.versionName(version)
                )
            )
        } catch {
            return .failure(error as? CurlError ?? CurlError(.other, message: "curl_easy_getinfo failed"))
        }
    }

    /// Releases the state of a transfer that will not be finished (it was cancelled, or never
    /// started), so the handle can be reused.
    func abandon() {
        newConnections = 0
        releaseTransfer()
    }

    /// Frees the header list and the copied body and empties the sink; safe to call twice.
    private func releaseTransfer() {
        if let list = headerList {
            // Clear libcurl's pointer before freeing, so the handle never holds a dangling list.
            _ = ccurl_easy_setopt_ptr(raw, CURLOPT_HTTPHEADER, nil)
            curl_slist_free_all(list)
            headerList = nil
        }
        if postedBody {
            // Setting CURLOPT_POSTFIELDS frees libcurl's COPYPOSTFIELDS copy; an idle handle in a
            // free list would otherwise keep the last request body alive.
            _ = ccurl_easy_setopt_ptr(raw, CURLOPT_POSTFIELDS, nil)
            postedBody = false
        }
        sink.reset()
        query = nil
    }

    private func applyMethodAndBody(_ request: HTTPRequest) throws {
        let method = request.method.uppercased()
        // Each call undoes what the previous request may have set, since there is no reset.
        try check(ccurl_easy_setopt_ptr(raw, CURLOPT_CUSTOMREQUEST, nil))
        switch method {
        case "GET" where request.body.isEmpty:
            try set(CURLOPT_HTTPGET, 1)
        case "HEAD":
            try set(CURLOPT_NOBODY, 1)
        default:
            guard !method.isEmpty, method.allSatisfy({ $0.isLetter || $0 == "-" }) else {
                throw CurlError(.invalidRequest, message: "invalid HTTP method")
            }
            try set(CURLOPT_NOBODY, 0)
            try set(CURLOPT_POST, 1)
            // Size first, then COPYPOSTFIELDS copies exactly that many bytes (NULs included), so
            // no Swift buffer has to outlive this call.
            try check(ccurl_easy_setopt_off_t(raw, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)))
            postedBody = true
            try request.body.withUnsafeBytes { bytes in
                // A non-nil pointer even for an empty body: nil would make libcurl read from stdin.
                let pointer = bytes.baseAddress ?? UnsafeRawPointer(errorBuffer)
                try check(ccurl_easy_setopt_ptr(raw, CURLOPT_COPYPOSTFIELDS, pointer))
            }
            if method != "POST" {
                try set(CURLOPT_CUSTOMREQUEST, method)
            }
        }
    }

    private func makeHeaderList(_ request: HTTPRequest) throws -> UnsafeMutablePointer<curl_slist>? {
        var list: UnsafeMutablePointer<curl_slist>? = nil
        var names: Set<String> = []
        do {
            for (name, value) in request.headers {
                // CR/LF would let a caller-supplied value inject extra headers or a second request.
                // Checked on UTF-8 bytes: as Characters, "\r\n" is one grapheme equal to neither.
                guard !name.isEmpty,
                    !name.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == UInt8(ascii: ":") }),
                    !value.utf8.contains(where: { $0 == 13 || $0 == 10 })
                else {
                    throw CurlError(.invalidRequest, message: "header contains CR, LF or an invalid name")
                }
                names.insert(name.lowercased())
                list = try append(list, "\(name): \(value)")
            }
            // libcurl 7.88 sends `Expect: 100-continue` for POST bodies over 1 KiB and then waits up
            // to a second for servers that never answer it; receipts are bigger than that.
            if !names.contains("expect") {
                list = try append(list, "Expect:")
            }
            return list
        } catch {
            curl_slist_free_all(list)
            throw error
        }
    }

    private func append(_ list: UnsafeMutablePointer<curl_slist>?, _ line: String) throws -> UnsafeMutablePointer<curl_slist> {
        guard let appended = curl_slist_append(list, line) else {
            throw CurlError(.other, message: "curl_slist_append failed")
        }
        return appended
    }

    private func set(_ option: CURLoption, _ value: Int) throws {
        try check(ccurl_easy_setopt_long(raw, option, value))
    }

    // libcurl copies string options (since 7.17), so the C string only has to live for the call.
    private func set(_ option: CURLoption, _ value: String) throws {
        try check(value.withCString { ccurl_easy_setopt_ptr(raw, option, $0) })
    }

    private func check(_ result: CURLcode) throws {
        guard result == CURLE_OK else {
            throw CurlError.map(result, detail: errorText(), bodyTooLarge: false, redacting: nil)
        }
    }

    private func errorText() -> String? {
        errorBuffer[0] == 0 ? nil : String(cString: errorBuffer)
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        // Never 0: libcurl reads 0 as "no timeout".
        return max(1, Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
    }

    private static func versionName(_ version: Int) -> String? {
        switch version {
        case Int(CURL_HTTP_VERSION_1_0): "1.0"
        case Int(CURL_HTTP_VERSION_1_1): "1.1"
        case Int(CURL_HTTP_VERSION_2_0): "2"
        case Int(CURL_HTTP_VERSION_3): "3"
        default: nil
        }
    }
}

@available(*, unavailable)
extension EasyHandle: Sendable {}

/// Collects one transfer's headers and body; the write callbacks reach it through an unretained
/// pointer, which is safe because the owning ``EasyHandle`` keeps it alive as long as the handle.
private final class ResponseSink {
    let limit: Int
    var body: [UInt8] = []
    var headers: [(name: String, value: String)] = []
    var tooLarge = false

    init(limit: Int) { self.limit = limit }

    func reset() {
        body = []
        headers = []
        tooLarge = false
    }

    /// Hands the collected response over without copying; the sink is left empty.
    func take() -> (headers: [(name: String, value: String)], body: [UInt8]) {
        defer { reset() }
        return (headers, body)
    }

    func appendBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard body.count + bytes.count <= limit else {
            tooLarge = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    func appendHeaderLine(_ bytes: UnsafeRawBufferPointer) {
        var line = String(decoding: bytes, as: UTF8.self)
        while line.last == "\n" || line.last == "\r" || line.last == "\r\n" { line.removeLast() }
        if line.hasPrefix("HTTP/") {
            // A new status line: interim (100 Continue) or earlier responses' headers are discarded.
            headers = []
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = String(line[..<colon])
        let value = line[line.index(after: colon)...].drop(while: { $0 == " " || $0 == "\t" })
        headers.append((name: name, value: String(value)))
    }
}

// Returning fewer bytes than offered makes libcurl abort with CURLE_WRITE_ERROR.
/// Opens the socket only for a public address (``CurlOptions/publicAddressesOnly``); libcurl
/// reports a refused one as a failed connect.
private func curlOpenPublicSocket(
    _ client: UnsafeMutableRawPointer?, _ purpose: curlsocktype, _ address: UnsafeMutablePointer<curl_sockaddr>?
) -> curl_socket_t {
    guard let address, purpose == CURLSOCKTYPE_IPCXN else { return CURL_SOCKET_BAD }
    let family = address.pointee.family
    let bytes: [UInt8]?
    switch family {
    case AF_INET:
        bytes = withUnsafeBytes(of: &address.pointee.addr) { raw in
            raw.baseAddress.map { base in
                withUnsafeBytes(of: base.assumingMemoryBound(to: sockaddr_in.self).pointee.sin_addr) { Array($0) }
            }
        }
    case AF_INET6:
        // curl's storage holds a whole sockaddr_in6 behind the sockaddr it names.
        bytes = UnsafeMutableRawPointer(mutating: address).advanced(by: MemoryLayout<curl_sockaddr>.offset(of: \.addr)!)
            .withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) } }
    default:
        bytes = nil
    }
    guard let bytes, PublicAddressPolicy.isPublic(bytes) else { return CURL_SOCKET_BAD }
    return socket(family, address.pointee.socktype, address.pointee.protocol)
}

private func curlWriteBody(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    guard let context else { return 0 }
    let total = size * count
    let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
    return sink.appendBody(UnsafeRawBufferPointer(start: data, count: total)) ? total : 0
}

private func curlWriteHeader(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    guard let context else { return 0 }
    let total = size * count
    let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
    sink.appendHeaderLine(UnsafeRawBufferPointer(start: data, count: total))
    return total
}
