import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The OpenAPI 3.1 description of every endpoint of the API, served at `GET /openapi.yaml`.
///
/// The document is `openapi.yaml` beside this file, shipped as a resource of this module, so what
/// is served is byte for byte what the repository holds (and what the tests validate).
///
/// ```swift
/// let router = Router(context: IngestRequestContext.self)
/// OpenAPIDocument.addRoute(to: router)  // GET /openapi.yaml, no authentication
/// ```
public enum OpenAPIDocument {
    /// Where the document is served.
    public static let path = "/openapi.yaml"

    /// The media type it is served as (RFC 9512).
    public static let mediaType = "application/yaml"

    /// The document's bytes.
    ///
    /// Read once, on first use: `addRoute(to:)` touches it, so a build without the module's resource
    /// bundle fails when the server starts rather than on the first request for the document.
    public static let yaml: [UInt8] = {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml"),
            let data = try? Data(contentsOf: url)
        else {
            preconditionFailure("openapi.yaml is missing from the IngestAPI resource bundle")
        }
        return [UInt8](data)
    }()

    /// Adds `GET /openapi.yaml` to `router`.
    ///
    /// No authentication: the document describes the API, it reveals no data, and clients and
    /// tools need it before they have a token.
    /// - Parameter router: The router the API's other routes are on.
    public static func addRoute<Context: RequestContext>(to router: Router<Context>) {
        let body = ByteBuffer(bytes: yaml)
        router.get(RouterPath(path)) { _, _ in
            Response(status: .ok, headers: [.contentType: mediaType], body: .init(byteBuffer: body))
        }
    }
}
