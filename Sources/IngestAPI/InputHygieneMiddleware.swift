import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ReceiptCore

/// The front doors' shared gate: before any handler runs, the path, the query string and a JSON or
/// form body must be text that Postgres can store (``InputHygiene``), or the request is answered
/// 422 with the field and the reason.
///
/// One middleware on the router rather than a check per handler, so a door added later is covered
/// the day it is routed. Handlers still check their own fields' lengths and shapes; this gate only
/// guarantees that nothing they accept carries a NUL, invalid UTF-8, a lone surrogate escape, or
/// JSON nested past ``InputHygiene/maxJSONDepth``.
///
/// A route listed in `queryParameters` (by `"METHOD /pattern"`) takes only the query parameters
/// listed for it: an unknown one is refused with 422 rather than ignored, so a misspelt
/// `user_id=` is an error the client sees, not an empty answer. Routes not listed (the softphone,
/// whose every parameter is an account variable, and the dashboard's pages) take any.
///
/// A `Content-Length` over `maxBodyBytes` is answered 413 before the body is read, and so is a
/// chunked body once it passes it; both close the connection. The body is read once here (up to
/// `maxBodyBytes`) and handed on buffered, so a handler reads the same bytes with its own,
/// possibly smaller, limit. Each door answers in its own format: `refusal` renders the answer from
/// the request, the status and the field errors.
public struct InputHygieneMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Renders a refusal: 422 with field errors, or 413 with none.
    public typealias Refusal = @Sendable (_ request: Request, _ status: HTTPResponse.Status, _ errors: [FieldError]) -> Response

    let maxBodyBytes: Int
    let queryParameters: [String: Set<String>]
    let refusal: Refusal

    /// Creates the gate.
    /// - Parameters:
    ///   - maxBodyBytes: the largest body any door accepts (413 beyond).
    ///   - queryParameters: the query parameters each listed route takes, by `"GET /client/subscriptions"`.
    ///   - refusal: how each door says no; by default ``IngestAPI/refusal(_:status:errors:)``.
    public init(maxBodyBytes: Int, queryParameters: [String: Set<String>] = [:], refusal: @escaping Refusal = IngestAPI.refusal) {
        self.maxBodyBytes = maxBodyBytes
        self.queryParameters = queryParameters
        self.refusal = refusal
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // A declared length over every door's limit is refused before a byte of the body is read:
        // waiting for 99999999999 bytes would hold the connection for as long as the client likes.
        // A batch's items are checked one by one by its handler (one bad item is its own 422),
        // which reads up to its own, larger limit.
        let batch = request.method == .post && IngestAPI.isBatchPath(context.endpointPath)
        if let declared = request.headers[.contentLength], Self.exceeds(declared, batch ? max(maxBodyBytes, IngestAPI.maxBatchBytes) : maxBodyBytes) {
            return tooLarge(request)
        }
        var request = request
        let problem: FieldError?
        do {
            problem =
                try await Self.problem(in: &request, maxBodyBytes: maxBodyBytes, body: !batch)
                ?? undeclaredParameter(request, route: context.endpointPath)
        } catch is NIOTooManyBytesError {
            return tooLarge(request)
        }
        guard let problem else { return try await next(request, context) }
        // The field's name only: the value is what was hostile, and may be a secret.
        context.logger.debug(
            "Request refused at the door", metadata: ["request.fields": .array([.string(problem.field)]), "http.status": "422"])
        return refusal(request, .unprocessableContent, [problem])
    }

    /// 413, and the connection closed after it: the rest of the body is never read (the server
    /// would otherwise read and drop it to reach the next request).
    func tooLarge(_ request: Request) -> Response {
        var response = refusal(request, .contentTooLarge, [])
        response.headers[.connection] = "close"
        return response
    }

    /// Whether a `Content-Length` value declares more than `limit` bytes: digits only (HTTP's
    /// parser refused anything else already); a number too long for an `Int` is over any limit.
    static func exceeds(_ declared: String, _ limit: Int) -> Bool {
        guard let length = Int(declared) else { return !declared.isEmpty && declared.utf8.allSatisfy { (0x30...0x39).contains($0) } }
        return length > limit
    }

    /// The first query parameter the matched route does not take (nil before routing, or for a
    /// route that takes any).
    func undeclaredParameter(_ request: Request, route: String?) -> FieldError? {
        guard let route, let allowed = queryParameters["\(request.method.rawValue) \(route)"] else { return nil }
        for (name, _) in request.uri.queryParameters where !allowed.contains(String(name)) {
            let field = InputHygiene.printableName(Array(name.utf8)) ?? "query"
            return FieldError(field: field, reason: "is not a parameter of this operation")
        }
        return nil
    }

    /// The first field of the request that cannot be stored; buffers the body it checks into `request`.
    static func problem(in request: inout Request, maxBodyBytes: Int, body: Bool = true) async throws -> FieldError? {
        if let problem = InputHygiene.pathProblem(request.uri.path.utf8) { return problem }
        if let query = request.uri.query, let problem = InputHygiene.formProblem(query.utf8, where: "query") { return problem }
        guard body else { return nil }
        switch BodyKind(request) {
        case .json:
            let body = try await request.collectBody(upTo: maxBodyBytes)
            return InputHygiene.jsonProblem(body.readableBytesView)
        case .form:
            let body = try await request.collectBody(upTo: maxBodyBytes)
            return InputHygiene.formProblem(body.readableBytesView, where: "form")
        case .other:
            return nil
        }
    }
}

extension IngestAPI {
    /// The client API's refusal at the shared gate: `{"errors": [{"field", "reason"}]}` for 422,
    /// `{"error"}` for 413.
    public static func refusal(_ request: Request, status: HTTPResponse.Status, errors: [FieldError]) -> Response {
        guard status == .unprocessableContent else { return json(status, ["error": .string("body too large")]) }
        return unprocessable(errors)
    }
}

/// What a body is checked as, by its media type.
enum BodyKind {
    case json, form, other

    /// `Application/JSON; charset=utf-8` → `application/json`: the part before any parameter,
    /// without blanks, lower-cased (byte by byte: Foundation's trimming cost more than the rest of
    /// this middleware for a small body). Nil when there is none (`;`, blanks): as for a request without the header.
    static func mediaType(_ value: String) -> String? {
        let type = HTTPText.trimmed(value.utf8.prefix { $0 != UInt8(ascii: ";") })
        return type.isEmpty ? nil : type.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }.string
    }

    init(_ request: Request) {
        let mediaType = request.headers[.contentType].flatMap(Self.mediaType)
        switch mediaType {
        case "application/json"?: self = .json
        case let type? where type.hasPrefix("application/") && type.hasSuffix("+json"): self = .json
        case "application/x-www-form-urlencoded"?: self = .form
        // The Cloud Softphone posts forms without a Content-Type; a body-less GET has nothing to read.
        case nil where request.method == .post || request.method == .put || request.method == .patch: self = .form
        default: self = .other
        }
    }
}

/// Header values as bytes: HTTP's optional whitespace is spaces and tabs only, and trimming it
/// with Foundation's character sets cost microseconds a request.
enum HTTPText {
    /// `bytes` without leading and trailing spaces and tabs.
    static func trimmed<Bytes: BidirectionalCollection<UInt8>>(_ bytes: Bytes) -> Bytes.SubSequence {
        let blank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        let start = bytes.firstIndex { !blank($0) } ?? bytes.endIndex
        let end = bytes.lastIndex { !blank($0) }.map { bytes.index(after: $0) } ?? start
        return bytes[start..<max(start, end)]
    }

    /// `text` without leading and trailing spaces and tabs.
    static func trimmed(_ text: some StringProtocol) -> String { String(decoding: trimmed(Array(text.utf8)), as: UTF8.self) }
}

extension Sequence<UInt8> {
    fileprivate var string: String { String(decoding: Array(self), as: UTF8.self) }
}
