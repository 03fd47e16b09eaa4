import Curl
import Foundation
import ReceiptTesting
import Synchronization
import Testing

/// A loopback HTTP(S) server on Python's asyncio in a `python3` child process: one thread holds
/// thousands of slow requests at once, which the thread-per-request server in CurlTests cannot. It
/// exits when our end of its stdin pipe closes, so no server outlives the test process.
final class AsyncLoopbackServer: Sendable {
    private let server: PythonServer
    var port: Int { server.port }

    static let script = #"""
        import asyncio, json, os, resource, ssl, sys, threading, urllib.parse

        # 1,000 concurrent connections need more descriptors than the usual soft limit of 1,024.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        stats = {"connections": 0, "active": 0, "peak": 0, "requests": 0}

        def response(status, body, headers=()):
            head = "HTTP/1.1 %d X\r\nContent-Length: %d\r\n" % (status, len(body))
            head += "".join("%s: %s\r\n" % kv for kv in headers)
            return head.encode() + b"\r\n" + body

        async def route(method, url, query, headers, body, peer, writer):
            path = url.path
            if path == "/delay":
                await asyncio.sleep(int(query["ms"]) / 1000)
                return response(200, b"late")
            if path == "/echo":
                extra = [("X-Method", method), ("X-Client-Port", str(peer[1]))]
                extra += [("X-Echo-" + k, v) for k, v in headers.items() if k.startswith("x-test")]
                return response(200, body, extra)
            if path == "/status":
                return response(int(query["code"]), b"unavailable", [("Retry-After", "1")])
            if path == "/big":
                return response(200, b"x" * int(query["n"]))
            if path == "/bigchunked":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                chunk = b"y" * 65536
                for _ in range(int(query["n"]) // 65536 + 1):
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
                return b"0\r\n\r\n"
            if path == "/stats":
                return response(200, json.dumps(stats).encode())
            return response(404, b"")

        async def handle(reader, writer):
            stats["connections"] += 1
            peer = writer.get_extra_info("peername")
            try:
                while True:
                    line = await reader.readline()
                    if not line:
                        break
                    method, target, _ = line.decode("latin-1").split(" ", 2)
                    headers = {}
                    while True:
                        header = await reader.readline()
                        if header in (b"\r\n", b"\n", b""):
                            break
                        name, _, value = header.decode("latin-1").partition(":")
                        headers[name.strip().lower()] = value.strip()
                    length = int(headers.get("content-length", "0"))
                    body = await reader.readexactly(length) if length else b""
                    url = urllib.parse.urlparse(target)
                    query = dict(urllib.parse.parse_qsl(url.query))
                    stats["requests"] += 1
                    stats["active"] += 1
                    stats["peak"] = max(stats["peak"], stats["active"])
                    try:
                        out = await route(method, url, query, headers, body, peer, writer)
                    finally:
                        stats["active"] -= 1
                    writer.write(out)
                    await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                pass
            finally:
                writer.close()

        async def main():
            context = None
            if len(sys.argv) == 3:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(sys.argv[1], sys.argv[2])
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda loop, context: None)  # clients that reject our cert
            server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096, ssl=context)
            print(server.sockets[0].getsockname()[1], flush=True)
            threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
            await server.serve_forever()

        asyncio.run(main())
        """#

    /// Starts the server; with `certificate` and `key` (PEM paths) it speaks HTTPS.
    init(certificate: String? = nil, key: String? = nil) throws {
        server = try PythonServer(script: Self.script, arguments: [certificate, key].compactMap { $0 })
    }

    /// `http://127.0.0.1:<port><path>` (or `https://localhost:<port><path>` for TLS servers).
    func url(_ path: String, tls: Bool = false) -> String { server.url(path, tls: tls) }

    /// The server's own counts: connections accepted and the peak of requests being handled at once.
    func stats(caInfo: String? = nil) throws -> (connections: Int, peak: Int) {
        var options = CurlOptions()
        options.caInfo = caInfo
        let response = try CurlEasy(options: options).perform(HTTPRequest(url: url("/stats", tls: caInfo != nil)))
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Int] ?? [:]
        // Minus the connection this request itself opened.
        return ((object["connections"] ?? 0) - 1, object["peak"] ?? 0)
    }
}

/// Records completions by index, counts how often each one was called, and lets a test await all.
final class Completions: Sendable {
    private struct State {
        var calls: [Int]
        var results: [Result<HTTPResponse, CurlError>?]
        var finished = 0
        var waiter: CheckedContinuation<Void, Never>? = nil
        var threads: Set<pthread_t> = []
        var lastAt: ContinuousClock.Instant? = nil
    }

    private let state: Mutex<State>

    init(expected: Int) {
        state = Mutex(State(calls: Array(repeating: 0, count: expected), results: Array(repeating: nil, count: expected)))
    }

    /// A completion for request `index`; calling it twice is recorded, not hidden.
    func completion(_ index: Int) -> CurlMulti.Completion {
        { result in self.record(index, result) }
    }

    func record(_ index: Int, _ result: Result<HTTPResponse, CurlError>) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.calls[index] += 1
            state.threads.insert(pthread_self())
            state.lastAt = .now
            guard state.results[index] == nil else { return nil }
            state.results[index] = result
            state.finished += 1
            guard state.finished == state.results.count else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns once every index has a result.
    func wait() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state in
                if state.finished == state.results.count { return true }
                state.waiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }

    var calls: [Int] { state.withLock { $0.calls } }
    var results: [Result<HTTPResponse, CurlError>?] { state.withLock { $0.results } }
    /// The threads the completions ran on.
    var threads: Set<pthread_t> { state.withLock { $0.threads } }
    /// When the last completion ran (on the engine's thread, not when a waiting task resumed).
    var lastAt: ContinuousClock.Instant? { state.withLock { $0.lastAt } }
}
