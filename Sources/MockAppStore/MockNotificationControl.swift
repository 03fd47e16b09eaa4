import Foundation
import Hummingbird
import ReceiptCore

/// The mock's notification control routes (tests, the demo, `receiptq notifications`):
///
/// - `POST /mock/notifications/targets` `{"bundle_id", "url", "version"?: "v2"|"v1", "password"?, "retries"?,
///   "retry_delay_seconds"?}` (`"url": null` stops sending);
/// - `POST /mock/notifications/events` `{"environment", "transaction_id", "type", "subtype"?, "copies"?,
///   "delay_ms"?, "hold"?}`: something happens to a purchase (see ``MockNotificationCenter/event``);
///   `{"type": "TEST", "bundle_id", "environment"}` sends a test notification;
/// - `POST /mock/notifications/release` `{"order": "reverse"|"shuffle"|"held"}`: sends the held ones;
/// - `GET /mock/notifications`: what was sent (uuid, type, delivered).
enum MockNotificationControl {
    static func addRoutes(to router: Router<BasicRequestContext>, state: MockAppStoreState) {
        let center = state.notifications
        router.post("/mock/notifications/targets") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let bundleID = body["bundle_id"]?.stringValue else { return Response(status: .badRequest) }
            if body["url"] == nil || body["url"] == .null {
                center.setTarget(nil, bundleID: bundleID)
                return Response(status: .noContent)
            }
            let data = try JSONEncoder().encode(body)
            center.setTarget(try JSONDecoder().decode(MockNotificationCenter.Target.self, from: data), bundleID: bundleID)
            return Response(status: .created)
        }
        router.post("/mock/notifications/events") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let type = body["type"]?.stringValue else { return Response(status: .badRequest) }
            let environment = body["environment"]?.stringValue?.lowercased() == "production" ? AppStoreEnvironment.production : .sandbox
            let delivery = MockNotificationCenter.Delivery(
                copies: body["copies"]?.intValue ?? 1, delay: .milliseconds(body["delay_ms"]?.intValue ?? 0),
                hold: body["hold"]?.boolValue ?? false)
            let uuid: String?
            if let id = body["transaction_id"]?.stringValue {
                uuid = try center.event(
                    type: type, subtype: body["subtype"]?.stringValue, transactionID: id, environment: environment, delivery: delivery)
            } else if let bundleID = body["bundle_id"]?.stringValue {
                uuid = try center.notify(
                    type: type, subtype: body["subtype"]?.stringValue, transaction: nil, bundleID: bundleID, environment: environment,
                    delivery: delivery)
            } else {
                return Response(status: .badRequest)
            }
            guard let uuid else { return MockServerAPI.notFound() }
            return MockAppStore.jsonResponse(["notificationUUID": .string(uuid)])
        }
        router.post("/mock/notifications/release") { request, context -> Response in
            let body = try await request.decode(as: JSONValue.self, context: context)
            let count = center.release(order: body["order"]?.stringValue ?? "held")
            return MockAppStore.jsonResponse(["released": .number(Double(count))])
        }
        router.get("/mock/notifications") { _, _ -> Response in
            MockAppStore.jsonResponse([
                "posts": .number(Double(center.posts)),
                "sent": .array(
                    center.sent.map {
                        .object([
                            "notificationUUID": .string($0.uuid), "type": .string($0.type), "subtype": $0.subtype.map(JSONValue.string) ?? .null,
                            "bundleId": .string($0.bundleID), "delivered": .bool($0.delivered),
                        ])
                    }),
            ])
        }
    }
}
