import DevTools
import Foundation
import Logging
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import ServiceLifecycle
import SystemTesting
import Telemetry
import Testing

/// Issue 41, items 3 and 4, against `receiptq serve`'s own listener (and the metrics listener), as
/// a hostile client speaks to it: raw sockets that send nothing, dribble their headers or bodies,
/// declare a body they never send, or open more connections than the cap.
@Suite(
    "HTTP listeners: header, body and idle timeouts, the connection cap, 413 before the body", .blockingWork,
    .enabled(if: TestEnvironment.integrationEnabled))
struct ServerTimeoutTests {
    /// serve alone (Redis for the intake, no Postgres needed) with `overrides`.
    func api(_ overrides: [String: String]) async throws -> StandaloneAPI {
        let environment = [
            "HTTP_HOST": "127.0.0.1", "HTTP_PORT": "0", "REDIS_HOSTNAME": TestEnvironment.redisHost,
            "REDIS_PORT": String(TestEnvironment.redisPort), "RECEIPTQ_TRUST_ROOTS_DIR": try TestSystem.trustDirectory.get().path,
        ].merging(overrides) { $1 }
        return try await StandaloneAPI(AppConfiguration(environment: environment))
    }

    static let liveRequest = "GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    /// Sends `bytes` one at a time at a slow client's pace until the server closes the connection;
    /// returns how many it took.
    func dribble(_ bytes: String, on connection: RawHTTPConnection) async throws -> Int {
        var sent = 0
        for byte in bytes {
            // Looked at first: a send after the close would be reset, perhaps before the 408 is read.
            guard !connection.isClosedByServer(), connection.send(String(byte)) else { return sent }
            sent += 1
            // A slowloris client's pace (the load this test is about), not a wait for the server.
            try await Task.sleep(for: .milliseconds(100))
        }
        return sent
    }

    @Test("A silent connection is closed within the header timeout, without an answer; dribbled headers (slowloris) get 408 and are cut")
    func headerTimeout() async throws {
        let api = try await api(["HTTP_HEADER_TIMEOUT_MS": "1000", "HTTP_IDLE_TIMEOUT_MS": "60000", "HTTP_BODY_TIMEOUT_MS": "60000"])
        defer { Task { await api.stop() } }
        let silent = try RawHTTPConnection(port: api.port)
        let slowloris = try RawHTTPConnection(port: api.port)

        let headers = "GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + String(repeating: "a", count: 200)
        let sent = try await dribble(headers, on: slowloris)
        // 1 s of a byte per 100 ms is about 10 bytes; 60 would be 6 s.
        #expect(sent < 60, "the dribbled head was cut (\(sent) bytes sent)")
        #expect(slowloris.unread.hasPrefix("HTTP/1.1 408"), "a started head is answered 408: \(slowloris.unread)")

        #expect(try await eventually(timeout: .seconds(20)) { silent.isClosedByServer() }, "the silent connection was closed")
        #expect(silent.unread.isEmpty, "a connection that sent nothing gets no answer")

        // The listener still serves a client that sends its request.
        let client = try RawHTTPConnection(port: api.port)
        client.send(Self.liveRequest)
        #expect(client.readResponse()?.status == 200)
    }

    @Test("A kept-alive connection is closed once idle past the idle timeout")
    func idleTimeout() async throws {
        let api = try await api(["HTTP_IDLE_TIMEOUT_MS": "1000", "HTTP_HEADER_TIMEOUT_MS": "60000"])
        defer { Task { await api.stop() } }
        let connection = try RawHTTPConnection(port: api.port)
        connection.send(Self.liveRequest)
        #expect(connection.readResponse()?.status == 200)
        #expect(try await eventually(timeout: .seconds(20)) { connection.isClosedByServer() }, "the idle connection was closed")
        #expect(connection.unread.isEmpty, "an idle connection is closed without an answer")
    }

    @Test("A body trickled below the minimum rate, or a stalled chunked body, is answered 408 and cut; a steady body longer than the timeout is read")
    func bodyTimeout() async throws {
        // A header timeout far past the body's: only the body timeout can cut these.
        let api = try await api(["HTTP_BODY_TIMEOUT_MS": "1000", "HTTP_BODY_MIN_BYTES_PER_SECOND": "100", "HTTP_HEADER_TIMEOUT_MS": "60000"])
        defer { Task { await api.stop() } }
        let head = "POST /client/itunes_connect/receipts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"

        // 10 bytes a second against a minimum of 100.
        let trickle = try RawHTTPConnection(port: api.port)
        trickle.send(head + "Content-Length: 400\r\n\r\n")
        let sent = try await dribble(#"{"receipt":""# + String(repeating: "a", count: 386) + #""}"#, on: trickle)
        // Cut after about 1.1 s, some 11 bytes; 60 would be 6 s.
        #expect(sent < 60, "the trickled body was cut (\(sent) bytes sent)")
        #expect(trickle.unread.hasPrefix("HTTP/1.1 408"), "answered 408: \(trickle.unread)")

        let chunked = try RawHTTPConnection(port: api.port)
        chunked.send(head + "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"rec\r\n")
        #expect(try await eventually(timeout: .seconds(20)) { chunked.isClosedByServer() }, "the stalled chunked body was cut")
        #expect(chunked.unread.hasPrefix("HTTP/1.1 408"), "answered 408: \(chunked.unread)")

        // 600 bytes a second for 2 s: past the 1 s timeout, but each 60 bytes buy 0.6 s more.
        let steady = try RawHTTPConnection(port: api.port)
        let body = Array((#"{"receipt":""# + String(repeating: "a", count: 1186) + #""}"#).utf8)
        steady.send(head + "Content-Length: \(body.count)\r\n\r\n")
        for start in stride(from: 0, to: body.count, by: 60) {
            #expect(steady.send(String(decoding: body[start..<min(start + 60, body.count)], as: UTF8.self)), "the steady body was not cut")
            // A steady client's pace, not a wait for the server.
            try await Task.sleep(for: .milliseconds(100))
        }
        let answer = steady.readResponse()
        #expect(answer != nil && answer?.status != 408, "the steady body was read and answered (\(answer?.status ?? 0))")
    }

    @Test(
        "Content-Length over API_MAX_BODY_BYTES (a batch's over its 10 MB) is answered 413 before a byte of the body is sent, token or not, and the connection closes"
    )
    func declaredLengthOverTheLimit() async throws {
        let api = try await api([:])
        defer { Task { await api.stop() } }
        let cases: [(path: String, length: String, authorization: String?)] = [
            ("/client/itunes_connect/receipts", "99999999999", nil), ("/client/itunes_connect/receipts", "99999999999", "Bearer not-a-token"),
            ("/client/itunes_connect/receipts", "2000000", nil), ("/client/itunes_connect/receipts/batch", "99999999999", nil),
        ]
        for (path, length, authorization) in cases {
            let connection = try RawHTTPConnection(port: api.port)
            connection.send(
                "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(length)\r\n"
                    + (authorization.map { "Authorization: \($0)\r\n" } ?? "") + "\r\n")
            // No body byte was sent: the answer cannot have waited for one.
            let response = connection.readResponse()
            #expect(response?.status == 413, "\(path), Content-Length \(length), \(authorization ?? "no token")")
            #expect(response?.headers["connection"] == "close")
            #expect(try await eventually(timeout: .seconds(20)) { connection.isClosedByServer() }, "closed after the 413")
        }
    }

    @Test("Normal requests and keep-alive reuse still work: several requests, one with a body, on one connection")
    func keepAliveReuse() async throws {
        let api = try await api([:])
        defer { Task { await api.stop() } }
        let connection = try RawHTTPConnection(port: api.port)
        connection.send(Self.liveRequest)
        #expect(connection.readResponse()?.status == 200)
        connection.send(Self.liveRequest)
        #expect(connection.readResponse()?.status == 200)
        let body = #"{"receipt":"abc"}"#
        connection.send(
            "POST /client/itunes_connect/receipts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
        #expect(connection.readResponse()?.status == 401, "the body was read and the request judged (no token)")
        connection.send(Self.liveRequest)
        #expect(connection.readResponse()?.status == 200)
        #expect(!connection.isClosedByServer())
    }

    @Test("HTTP_MAX_CONNECTIONS: one connection more is closed at once and counted; a connection is served again once one closes")
    func connectionCap() async throws {
        let api = try await api(["HTTP_MAX_CONNECTIONS": "2"])
        defer { Task { await api.stop() } }
        var held = [try RawHTTPConnection(port: api.port), try RawHTTPConnection(port: api.port)]
        for connection in held {
            connection.send(Self.liveRequest)
            #expect(connection.readResponse()?.status == 200, "the first two connections are served")
        }
        let third = try RawHTTPConnection(port: api.port)
        #expect(try await eventually(timeout: .seconds(20)) { third.isClosedByServer() }, "the third connection was closed")
        #expect(third.unread.isEmpty)

        held.removeFirst()  // closes it
        var scrape: Scrape?
        let served = try await eventually(timeout: .seconds(20)) {
            let connection = try RawHTTPConnection(port: api.port)
            connection.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            guard let response = connection.readResponse(), response.status == 200 else { return false }
            scrape = Scrape(text: String(decoding: response.body, as: UTF8.self))
            return true
        }
        #expect(served, "a connection is served once one of the two closed")
        #expect((scrape?.value(MetricCatalog.httpConnectionsRefused, ["listener": "api"]) ?? 0) >= 1)
        #expect(scrape?.value(MetricCatalog.httpConnections, ["listener": "api"]) == 2, "the held connection and the scrape's")
        #expect(scrape?.violations() == [])
    }

    @Test("The metrics listener (METRICS_PORT) closes a silent connection within the header timeout too")
    func metricsListener() async throws {
        let configuration = try AppConfiguration(environment: [
            "HTTP_HOST": "127.0.0.1", "METRICS_PORT": "0", "HTTP_HEADER_TIMEOUT_MS": "1000", "REDIS_HOSTNAME": TestEnvironment.redisHost,
            "REDIS_PORT": String(TestEnvironment.redisPort),
        ])
        var logger = Logger(label: "it-metrics-listener")
        logger.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let server = try #require(
            ReceiptQueueApp.makeMetricsServer(configuration, metrics: PrometheusExporter(), logger: logger) { port in
                continuation.yield(port)
                continuation.finish()
            })
        let group = ServiceGroup(services: [server], gracefulShutdownSignals: [], logger: logger)
        let task = Task(executorPreference: ServerThreads.shared) { try await group.run() }
        defer {
            Task {
                await group.triggerGracefulShutdown()
                _ = try? await task.value
            }
        }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        let silent = try RawHTTPConnection(port: port)
        let client = try RawHTTPConnection(port: port)
        client.send(Self.liveRequest)
        #expect(client.readResponse()?.status == 200)
        #expect(try await eventually(timeout: .seconds(20)) { silent.isClosedByServer() }, "the silent connection was closed")
    }
}
