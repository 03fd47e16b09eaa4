internal import CCurl

/// Process-wide libcurl initialisation.
///
/// `curl_global_init` is not thread-safe and must run before any other libcurl call, so it runs
/// exactly once, from a lazily initialised static (Swift runs those under `swift_once`).
/// ``CurlEasy/init(options:)`` calls ``initialize()`` itself; calling it earlier at start-up is
/// harmless and keeps the one-time cost out of the first request.
public enum CurlGlobal {
    private static let result: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))

    /// Initialises libcurl once; later calls do nothing.
    public static func initialize() {
        _ = result
    }

    /// Whether the one-time initialisation succeeded (it can only fail when out of memory).
    static var succeeded: Bool {
        result == CURLE_OK
    }

    /// The libcurl version line, e.g. `libcurl/7.88.1 OpenSSL/3.0.… zlib/… nghttp2/…`.
    public static var version: String {
        initialize()
        guard let cString = curl_version() else { return "libcurl/unknown" }
        return String(cString: cString)
    }
}
