import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore

/// The mock's notification endpoints of the App Store Server API, answered from what its
/// ``MockNotificationCenter`` sent, with the same JWT check as the rest of the API:
///
/// - `POST …/inApps/v1/notifications/history[?paginationToken=]` `{"startDate", "endDate",
///   "notificationType"?, "onlyFailures"?}`: Get Notification History, 20 a page, oldest first;
/// - `POST …/inApps/v1/notifications/test`: Request a Test Notification (`testNotificationToken`);
/// - `GET …/inApps/v1/notifications/test/{token}`: Get Test Notification Status.
extension MockServerAPI {
    static func addNotificationRoutes(to router: Router<BasicRequestContext>, state: MockAppStoreState) {
        let center = state.notifications
        router.post("/storekit/{environment}/inApps/v1/notifications/history") { request, context in
            try await authorized(request, context, state: state, operation: "notification_history") { environment, bundleID in
                let body = try await request.decode(as: JSONValue.self, context: context)
                guard let start = body["startDate"]?.stringValue.flatMap(Double.init), let end = body["endDate"]?.stringValue.flatMap(Double.init),
                    start <= end
                else { return error(400, 4_000_015) }
                let type = body["notificationType"]?.stringValue
                let onlyFailures = body["onlyFailures"]?.boolValue ?? false
                let matching = center.sent.filter {
                    let signed = ($0.signedDate.timeIntervalSince1970 * 1000).rounded()
                    return $0.bundleID == bundleID && $0.environment == environment && signed >= start && signed < end
                        && (type == nil || $0.type == type) && (!onlyFailures || !$0.delivered)
                }
                let from = request.uri.queryParameters["paginationToken"].flatMap { Int(String($0)) } ?? 0
                guard from >= 0, from <= matching.count else { return error(400, 4_000_014) }
                let page = matching[from..<min(from + pageSize, matching.count)]
                let next = from + page.count
                center.listed(page.map(\.uuid))
                var answer: [String: JSONValue] = [
                    "notificationHistory": .array(
                        page.map { sent in
                            .object([
                                "signedPayload": .string(sent.signedPayload),
                                "sendAttempts": attempts(sent),
                            ])
                        }),
                    "hasMore": .bool(next < matching.count),
                ]
                if next < matching.count { answer["paginationToken"] = .string(String(next)) }
                return json(answer)
            }
        }
        router.post("/storekit/{environment}/inApps/v1/notifications/test") { request, context in
            try await authorized(request, context, state: state, operation: "notification_test") { environment, bundleID in
                let uuid = try center.notify(type: "TEST", transaction: nil, bundleID: bundleID, environment: environment)
                return json(["testNotificationToken": .string(uuid)])
            }
        }
        router.get("/storekit/{environment}/inApps/v1/notifications/test/{token}") { request, context in
            try await authorized(request, context, state: state, operation: "notification_test_status") { environment, bundleID in
                guard let token = context.parameters.get("token"),
                    let sent = center.sent.first(where: { $0.uuid == token && $0.bundleID == bundleID && $0.environment == environment })
                else { return error(404, 4_040_008) }
                return json([
                    "signedPayload": .string(sent.signedPayload),
                    "sendAttempts": attempts(sent),
                ])
            }
        }
    }

    /// Apple's `sendAttempts`: each post of a notification, when and how it went.
    private static func attempts(_ sent: MockNotificationCenter.Sent) -> JSONValue {
        .array(
            sent.attempts.map {
                .object([
                    "attemptDate": .number(($0.date.timeIntervalSince1970 * 1000).rounded()), "sendAttemptResult": .string($0.result),
                ])
            })
    }

    /// Counts the call and checks the JWT as every Server API route does; then `body`. With
    /// `scripted`, a rule a test set for the path applies first (delay; status, error code and
    /// `Retry-After` instead of the answer); without, only an outage's 503 does.
    static func authorized(
        _ request: Request, _ context: BasicRequestContext, state: MockAppStoreState, operation: String, scripted: Bool = false,
        body: (AppStoreEnvironment, String) async throws -> Response
    ) async throws -> Response {
        let api = state.serverAPI
        guard let name = context.parameters.get("environment"), let environment = AppStoreEnvironment(rawValue: name) else {
            return Response(status: .notFound)
        }
        api.count("\(environment.rawValue) \(operation)")
        api.count("\(environment.rawValue) all")
        let rule =
            scripted ? api.takeRule(path: request.uri.path.replacingOccurrences(of: "/storekit/\(environment.rawValue)", with: "")) : api.outageRule()
        if let delay = rule?.delayMs, delay > 0 { try await Task.sleep(for: .milliseconds(delay)) }
        guard let bundleID = authorizedBundle(request, api: api) else { return Response(status: .unauthorized) }
        if let rule, rule.httpStatus != nil || rule.errorCode != nil {
            var response = error(rule.httpStatus ?? 500, rule.errorCode)
            if let retryAfter = rule.retryAfterMs, let header = HTTPField.Name("Retry-After") { response.headers[header] = String(retryAfter) }
            return response
        }
        return try await body(environment, bundleID)
    }
}
