import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOEmbedded
import Synchronization

/// A Hummingbird application's responder driven in process, as its server would hand it requests,
/// without a socket: for tests of routes, middleware and handlers on in-memory doubles.
///
/// Why not `HummingbirdTesting`: its `.router` framework does the same, but the product brings its
/// live framework's client with it (AsyncHTTPClient, and with that BoringSSL, HTTP/2 and SOCKS),
/// which no test here uses and which was about a third of a clean build's compiling.
public struct RouterClient<Responder: HTTPResponder>: Sendable
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    let responder: Responder
    let logger: Logger

    /// Sends one request through the responder. A `Content-Length` is set when there is a body,
    /// as a client would; an error the responder throws (its router answers `HTTPError`s itself)
    /// is a 500, as a server would answer it.
    public func execute(uri: String, method: HTTPRequest.Method, headers: HTTPFields = [:], body: ByteBuffer? = nil) async throws -> RouterResponse {
        var headers = headers
        if let body { headers[.contentLength] = String(body.readableBytes) }
        let request = Request(
            head: HTTPRequest(method: method, scheme: "http", authority: "localhost", path: uri, headerFields: headers),
            body: RequestBody(buffer: body ?? ByteBuffer()))
        let context = Responder.Context(source: ApplicationRequestContextSource(channel: NIOAsyncTestingChannel(), logger: logger))
        let response: Hummingbird.Response
        do {
            response = try await responder.respond(to: request, context: context)
        } catch {
            response = Hummingbird.Response(status: .internalServerError)
        }
        let collected = CollectedBody()
        try await response.body.write(collected)
        return RouterResponse(status: response.status, headers: response.headers, body: collected.buffer)
    }

    /// Sends one request and hands the answer to `check`.
    @discardableResult
    public func execute<Value>(
        uri: String, method: HTTPRequest.Method, headers: HTTPFields = [:], body: ByteBuffer? = nil,
        _ check: (RouterResponse) async throws -> Value
    ) async throws -> Value {
        try await check(execute(uri: uri, method: method, headers: headers, body: body))
    }
}

/// What a ``RouterClient``'s responder answered: the head and the whole body.
public struct RouterResponse: Sendable {
    /// The status.
    public var status: HTTPResponse.Status
    /// The header fields, as the responder set them (no server adds `Date` or `Content-Length` here).
    public var headers: HTTPFields
    /// Every byte the body wrote.
    public var body: ByteBuffer
}

/// A response body written into one buffer.
private struct CollectedBody: ResponseBodyWriter {
    private let storage = Storage()

    private final class Storage: Sendable {
        let buffer = Mutex(ByteBuffer())
    }

    var buffer: ByteBuffer { storage.buffer.withLock { $0 } }

    func write(_ buffer: ByteBuffer) async throws {
        storage.buffer.withLock { collected in
            var buffer = buffer
            collected.writeBuffer(&buffer)
        }
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}

extension ApplicationProtocol {
    /// Runs `body` with a client of this application's responder (its services are not run).
    public func withRouterClient<Value>(_ body: (RouterClient<Responder>) async throws -> Value) async throws -> Value {
        try await body(RouterClient(responder: try await responder, logger: logger))
    }
}
