import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore

/// The events API, for backends that pull (or catch up after their webhook endpoint was down):
/// `GET /client/events?after=<event id>&limit=&type=&user_identifier=`, oldest first, every event
/// exactly once to a reader that pages with `after` = the last id it got (`next_after`).
extension IngestAPI {
    func addEventRoutes(to router: Router<IngestRequestContext>, catalog: any EventCatalog) {
        router.get("/client/events") { request, context in
            try await events(request, context: context, catalog: catalog)
        }
    }

    func events(_ request: Request, context: IngestRequestContext, catalog: any EventCatalog) async throws -> Response {
        let app: AppRecord
        switch await authorize(request, context: context) {
        case .success(let found): app = found
        case .failure(let refusal): return refusal.response
        }
        let parameters = request.uri.queryParameters
        var query = EventQuery()
        var errors: [FieldError] = []
        if let after = parameters.get("after") {
            // Either case: the API prints lower case (RFC 9562), a client may have upper-cased it.
            if let id = UUID(uuidString: after) { query.after = id } else { errors.append(FieldError(field: "after", reason: "must be an event id")) }
        }
        if let limit = parameters.get("limit") {
            if let value = Int(limit), (1...1000).contains(value) {
                query.limit = value
            } else {
                errors.append(FieldError(field: "limit", reason: "must be an integer from 1 to 1000"))
            }
        }
        if let type = parameters.get("type") {
            let patterns = type.split(separator: ",", omittingEmptySubsequences: false).map { String($0) }
            if patterns.allSatisfy(EventType.isValidPattern) {
                query.types = EventType.allCases.filter { type in patterns.contains(where: type.matches) }
            } else {
                errors.append(FieldError(field: "type", reason: "must be event types or families (subscription.*), comma-separated"))
            }
        }
        if let user = parameters.get("user_identifier") {
            if user.isEmpty || user.unicodeScalars.count > 255 {
                errors.append(FieldError(field: "user_identifier", reason: "must be 1 to 255 characters"))
            } else {
                query.userIdentifier = user
            }
        }
        guard errors.isEmpty else { return unprocessable(errors) }
        do {
            guard let page = try await catalog.events(appID: app.id, query: query) else {
                // Well-formed, but naming nothing: the cursor's resource is not found.
                return json(.notFound, ["error": .string("after names no event of this app")])
            }
            var writer = JSONWriter(capacity: 256 + page.events.count * 1536)
            writer.openObject()
            writer.key("events")
            writer.openArray()
            for event in page.events { event.write(to: &writer) }
            writer.closeArray()
            writer.member("has_more", page.hasMore)
            // Where the next page starts: the last event listed, or the same cursor when none was.
            writer.member("next_after", (page.events.last?.id ?? query.after)?.canonical)
            writer.closeObject()
            return jsonBytes(.ok, writer.bytes)
        } catch {
            // The only text Postgres could refuse here is the user filter (a UUID cannot be refused).
            return lookupFailed(error, field: "user_identifier", logger: context.logger)
        }
    }
}
