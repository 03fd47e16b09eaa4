import Curl
import DevTools
import Foundation
import ReceiptTesting
import SystemTesting
import Testing

/// A loopback HTTP(S) server in a `python3` child process, so the tests need no network and no
/// third-party package. It exits when our end of its stdin pipe closes, i.e. when the test process
/// ends, so no server outlives the run.
private final class LoopbackServer: Sendable {
    private let server: PythonServer
    var port: Int { server.port }

    static let script = #"""
        import http.server, socketserver, ssl, sys, threading, time, urllib.parse

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def reply(self, status, body, headers=()):
                self.send_response(status)
                for k, v in headers: self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def handle_any(self):
                url = urllib.parse.urlparse(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if url.path == "/echo":
                    headers = [("X-Method", self.command), ("X-Client-Port", str(self.client_address[1]))]
                    for k, v in self.headers.items():
                        if k.lower().startswith("x-test"): headers.append(("X-Echo-" + k, v))
                    self.reply(200, body, headers)
                elif url.path == "/status":
                    self.reply(int(q["code"]), b"unavailable", [("Retry-After", "1")])
                elif url.path == "/delay":
                    time.sleep(int(q["ms"]) / 1000)
                    self.reply(200, b"late")
                elif url.path == "/big":
                    self.reply(200, b"x" * int(q["n"]))
                elif url.path == "/bigchunked":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    chunk = b"y" * 65536
                    for _ in range(int(q["n"]) // 65536 + 1):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.reply(404, b"")
            do_GET = do_POST = do_PUT = handle_any

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            def handle_error(self, request, client_address): pass  # clients that reject our TLS cert reset

        server = Server(("127.0.0.1", 0), Handler)
        if len(sys.argv) == 3:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(sys.argv[1], sys.argv[2])
            server.socket = context.wrap_socket(server.socket, server_side=True)
        print(server.server_address[1], flush=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        sys.stdin.read()
        """#

    /// Starts the server; with `certificate` and `key` (PEM paths) it speaks HTTPS.
    init(certificate: String? = nil, key: String? = nil) throws {
        server = try PythonServer(script: Self.script, arguments: [certificate, key].compactMap { $0 })
    }

    /// `http://127.0.0.1:<port><path>` (or `https://localhost:<port><path>` for TLS servers).
    func url(_ path: String, tls: Bool = false) -> String { server.url(path, tls: tls) }

    static let shared: LoopbackServer? = try? LoopbackServer()
}

private func requireServer() throws -> LoopbackServer {
    try #require(LoopbackServer.shared, "python3 loopback server did not start")
}

private func options(timeout: Duration = .seconds(10), maxBytes: Int = 4 << 20) -> CurlOptions {
    var options = CurlOptions()
    options.requestTimeout = timeout
    options.connectTimeout = .seconds(2)
    options.maxResponseBytes = maxBytes
    return options
}

@Suite("Curl façade", .blockingWork)
struct CurlTests {
    @Test func versionMentionsLibcurl() {
        CurlGlobal.initialize()
        CurlGlobal.initialize()
        #expect(CurlEasy.version.hasPrefix("libcurl/"))
    }

    @Test func getAndPostRoundTripBinaryBodiesAndHeaders() throws {
        let server = try requireServer()
        let easy = try CurlEasy(options: options())
        let body: [UInt8] = [0x00, 0x01, 0xFF, 0x00, 0x7B] + Array(repeating: 0x41, count: 5000)
        let post = try easy.perform(
            HTTPRequest(method: "POST", url: server.url("/echo"), headers: [("X-Test-Token", "abc def")], body: body)
        )
        #expect(post.status == 200)
        #expect(post.body == body)
        #expect(post.header("x-method") == "POST")
        #expect(post.header("X-ECHO-X-TEST-TOKEN") == "abc def")
        #expect(post.httpVersion == "1.1")
        #expect(post.totalTime > .zero)

        let get = try easy.perform(HTTPRequest(url: server.url("/echo")))
        #expect(get.status == 200)
        #expect(get.header("X-Method") == "GET")
        #expect(get.body.isEmpty)
    }

    @Test func errorStatusIsAResponse() throws {
        let server = try requireServer()
        let response = try CurlEasy(options: options()).perform(HTTPRequest(url: server.url("/status?code=503")))
        #expect(response.status == 503)
        #expect(response.header("retry-after") == "1")
        #expect(response.body == Array("unavailable".utf8))
    }

    @Test func connectionRefusedFailsFast() throws {
        let port = try freeLoopbackPort()
        let start = ContinuousClock.now
        let error = #expect(throws: CurlError.self) {
            try CurlEasy(options: options()).perform(HTTPRequest(url: "http://127.0.0.1:\(port)/"))
        }
        #expect(error?.code == .couldNotConnect)
        #expect(ContinuousClock.now - start < .seconds(2))
    }

    @Test func slowServerTimesOutAfterRequestTimeout() throws {
        let server = try requireServer()
        let start = ContinuousClock.now
        let error = #expect(throws: CurlError.self) {
            try CurlEasy(options: options(timeout: .milliseconds(700)))
                .perform(HTTPRequest(url: server.url("/delay?ms=3000&secret=hunter2")))
        }
        let elapsed = ContinuousClock.now - start
        #expect(error?.code == .timeout)
        #expect(error?.isTimeout == true)
        #expect(error?.description.contains("hunter2") == false)
        // Generous upper bound: the point is "about the timeout", not "whatever the server delays" (3 s).
        #expect(elapsed >= .milliseconds(650) && elapsed < .milliseconds(2500))
    }

    @Test func oneHandleReusesItsConnection() throws {
        let server = try requireServer()
        let easy = try CurlEasy(options: options())
        let first = try easy.perform(HTTPRequest(method: "POST", url: server.url("/echo"), body: [1]))
        #expect(easy.lastNewConnections == 1)
        let second = try easy.perform(HTTPRequest(method: "POST", url: server.url("/echo"), body: [2]))
        #expect(easy.lastNewConnections == 0)
        #expect(first.header("X-Client-Port") == second.header("X-Client-Port"))
        #expect(second.body == [2])
    }

    @Test(arguments: ["/big?n=300000", "/bigchunked?n=300000"])
    func oversizedResponseIsRefused(path: String) throws {
        let server = try requireServer()
        let easy = try CurlEasy(options: options(maxBytes: 100_000))
        let error = #expect(throws: CurlError.self) { try easy.perform(HTTPRequest(url: server.url(path))) }
        #expect(error?.code == .responseTooLarge)
        // The handle stays usable after an aborted transfer.
        #expect(try easy.perform(HTTPRequest(url: server.url("/big?n=99999"))).body.count == 99_999)
    }

    @Test(arguments: ["ftp://127.0.0.1/", "file:///etc/passwd", "gopher://127.0.0.1/", "dict://127.0.0.1/"])
    func nonHTTPSchemesAreRefused(url: String) throws {
        let error = #expect(throws: CurlError.self) { try CurlEasy(options: options()).perform(HTTPRequest(url: url)) }
        #expect(error?.code == .unsupportedProtocol)
    }

    @Test func headerInjectionIsRefused() throws {
        let error = #expect(throws: CurlError.self) {
            try CurlEasy(options: options()).perform(
                HTTPRequest(url: "http://127.0.0.1:1/", headers: [("X-Test", "a\r\nHost: evil")])
            )
        }
        #expect(error?.code == .invalidRequest)
    }

    @Test func httpsVerifiesThePeerAgainstCAInfo() throws {
        let files = try LocalhostTLS(in: FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-tls-\(UUID().uuidString)"))
        let server = try LoopbackServer(certificate: files.certificate, key: files.key)

        let untrusted = #expect(throws: CurlError.self) {
            try CurlEasy(options: options()).perform(HTTPRequest(url: server.url("/echo", tls: true)))
        }
        #expect(untrusted?.code == .tls)

        var trusted = options()
        trusted.caInfo = files.ca
        let easy = try CurlEasy(options: trusted)
        let response = try easy.perform(HTTPRequest(method: "POST", url: server.url("/echo", tls: true), body: [0, 1, 2]))
        #expect(response.status == 200)
        #expect(response.body == [0, 1, 2])
        _ = try easy.perform(HTTPRequest(url: server.url("/echo", tls: true)))
        #expect(easy.lastNewConnections == 0)

        // Verification includes the host name: the certificate names only `localhost`.
        let wrongHost = #expect(throws: CurlError.self) {
            try CurlEasy(options: trusted).perform(HTTPRequest(url: "https://127.0.0.1:\(server.port)/echo"))
        }
        #expect(wrongHost?.code == .tls)
    }

    @Test func httpClientRunsTwentyConcurrentSends() async throws {
        let server = try requireServer()
        let client = try HTTPClient(options: options(), lanes: 4)
        let statuses = try await withThrowingTaskGroup(of: (Int, [UInt8]).self) { group in
            for index in 0..<20 {
                group.addTask {
                    let body = Array("request \(index)".utf8)
                    let response = try await client.send(HTTPRequest(method: "POST", url: server.url("/echo"), body: body))
                    return (response.status, response.body == body ? [1] : [0])
                }
            }
            var all: [(Int, [UInt8])] = []
            for try await result in group { all.append(result) }
            return all
        }
        #expect(statuses.count == 20)
        #expect(statuses.allSatisfy { $0.0 == 200 && $0.1 == [1] })
    }
}
