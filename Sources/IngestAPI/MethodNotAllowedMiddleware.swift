import HTTPTypes
import Hummingbird
import NIOCore
import ReceiptCore

/// 405 with `Allow` for a method a route does not serve (RFC 9110 §15.5.6), instead of the
/// router's 404: `TRACE /client/subscriptions` names a resource that exists.
///
/// Hummingbird sends every request it cannot route, whatever the reason, through the middleware
/// of its not-found chain, which this joins: add it *after* the last route, with the router's
/// finished route table. It then sees only requests no route took, and never a handler's own 404.
///
/// The path is matched the way the router's trie matches it: segment by segment, a constant
/// before a `{parameter}`, so `Allow` names the methods of the route the path would reach.
public struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    /// One route pattern, split into segments, with the methods it serves.
    struct Pattern {
        var segments: [Substring]
        var methods: Set<String>
    }

    let patterns: [Pattern]

    /// Creates the middleware over a finished route table.
    /// - Parameter routes: every route as (method, path pattern), e.g. `("GET", "/admin/api/{set}/{id}")`.
    public init(routes: [(method: String, path: String)]) {
        var byPath: [String: Set<String>] = [:]
        for route in routes { byPath[route.path, default: []].insert(route.method) }
        self.patterns = byPath.map { Pattern(segments: Self.segments($0.key), methods: $0.value) }
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            guard let allowed = allowedMethods(path: request.uri.path), !allowed.contains(request.method.rawValue) else { throw error }
            var response = json(.methodNotAllowed, ["error": .string("method not allowed")])
            response.headers[.allow] = allowed.sorted().joined(separator: ", ")
            return response
        }
    }

    /// The methods of the route `path` reaches; nil when no route matches it.
    func allowedMethods(path: String) -> Set<String>? {
        let wanted = Self.segments(path)
        var best: (rank: [Int], methods: Set<String>)?
        for pattern in patterns {
            guard let rank = Self.rank(pattern.segments, matching: wanted) else { continue }
            if let current = best, !current.rank.lexicographicallyPrecedes(rank) { continue }
            best = (rank, pattern.methods)
        }
        return best?.methods
    }

    /// How specifically `pattern` matches `path`, segment by segment (2 a constant, 1 a parameter,
    /// 0 a wildcard: the trie's order), or nil when it does not match.
    static func rank(_ pattern: [Substring], matching path: [Substring]) -> [Int]? {
        var rank: [Int] = []
        for (index, segment) in pattern.enumerated() {
            if segment == "**" { return rank + [0] }
            guard index < path.count else { return nil }
            if segment == "*" {
                rank.append(0)
            } else if segment.hasPrefix("{") && segment.hasSuffix("}") {
                rank.append(1)
            } else if segment == path[index] {
                rank.append(2)
            } else {
                return nil
            }
        }
        return pattern.count == path.count ? rank : nil
    }

    static func segments(_ path: String) -> [Substring] {
        path.split(separator: "/", omittingEmptySubsequences: true)
    }
}
