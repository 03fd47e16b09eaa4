import HTTPTypes
import Hummingbird
import NIOCore
import RouterTesting
import Testing

@testable import IngestAPI

@Suite("405 with Allow: a method the path does not serve, matched as the router matches")
struct MethodNotAllowedTests {
    func application() -> some ApplicationProtocol {
        let router = Router(context: IngestRequestContext.self)
        router.get("/items/{id}") { _, context in
            // A handler's own 404 must stay a 404.
            context.parameters.get("id") == "missing" ? Response(status: .notFound) : Response(status: .ok)
        }
        router.post("/items/{id}/retry") { _, _ in Response(status: .ok) }
        router.post("/items/special") { _, _ in Response(status: .ok) }
        router.delete("/items/special") { _, _ in Response(status: .ok) }
        router.add(middleware: MethodNotAllowedMiddleware(routes: router.routes.map { ($0.method.rawValue, $0.path.description) }))
        return Application(router: router)
    }

    @Test("Undeclared methods: 405 with the route's methods; unknown paths and handler 404s stay 404")
    func answers() async throws {
        try await application().withRouterClient { client in
            for method: HTTPRequest.Method in [.init("TRACE")!, .put, .delete, .patch, .post] {
                try await client.execute(uri: "/items/42", method: method) { response in
                    #expect(response.status == .methodNotAllowed, "\(method)")
                    #expect(response.headers[.allow] == "GET")
                }
            }
            // A constant segment wins over a parameter, as in the router's trie.
            try await client.execute(uri: "/items/special", method: .get) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == "DELETE, POST")
            }
            try await client.execute(uri: "/items/42/retry", method: .get) { response in
                #expect(response.headers[.allow] == "POST")
            }
            try await client.execute(uri: "/items/missing", method: .get) { response in
                #expect(response.status == .notFound)
                #expect(response.headers[.allow] == nil)
            }
            for path in ["/nothing", "/items", "/items/1/2/3"] {
                try await client.execute(uri: path, method: .get) { response in
                    #expect(response.status == .notFound, "\(path)")
                }
            }
        }
    }

    @Test("Matching ranks constants over parameters over wildcards")
    func ranking() {
        let middleware = MethodNotAllowedMiddleware<IngestRequestContext>(routes: [
            ("GET", "/a/{x}"), ("POST", "/a/b"), ("PUT", "/a/*"), ("GET", "/files/**"),
        ])
        #expect(middleware.allowedMethods(path: "/a/b") == ["POST"])
        #expect(middleware.allowedMethods(path: "/a/c") == ["GET"])
        #expect(middleware.allowedMethods(path: "/files/x/y/z") == ["GET"])
        #expect(middleware.allowedMethods(path: "/b") == nil)
    }
}
