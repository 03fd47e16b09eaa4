import DevTools
import Foundation
import Libpq
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

extension WebhookTests {
    @Test("A delivery that cannot be signed is a dead letter naming its endpoint and event; fixed, it is redelivered from the dashboard")
    func deadDeliveryRedelivered() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let connection = try system.postgres()
        defer { connection.close() }
        // Sealed with another key than the system's (a key rotated without re-sealing): the worker
        // cannot open the secret, so it cannot sign, so it gives up at once rather than retry.
        let receiver = WebhookReceiver(secret: "pending")
        let (url, task) = try await receiver.start(logger: Self.quiet)
        defer { task.cancel() }
        let (endpoint, _) = try WebhookAdmin(connection: connection, secrets: try SecretBox(key: SecureRandom.bytes(32))).add(
            appID: system.app.id, url: url, eventTypes: ["subscription.started"], allowPrivate: true, audit: .test("webhook.add"))
        let user = "dead-hook-\(UUID().uuidString.prefix(8))"
        _ = try await subscribe(system, user: user)
        #expect(try await eventually { try deliveryRows(system) == ["subscription.started dead 1 webhook_secret_unreadable"] })

        // The dead letter says which endpoint and which event, on the page and in the admin API.
        let browser = DashboardPagesTests.Browser(system)
        #expect(try await browser.logIn().location == "/admin")
        // The delivery row turns dead in the commit, the dead letter appears in the settlement
        // just after it (Redis): under load that can be seconds later.
        var list = try await browser.get("/admin/dead?q=\(endpoint.canonical)")
        #expect(
            try await eventually {
                list = try await browser.get("/admin/dead?q=\(endpoint.canonical)")
                return list.status == 200 && list.text.contains(#"<span class="tag">webhook</span>"#)
            })
        #expect(list.text.contains("subscription.started"))
        #expect(list.text.contains("webhook_secret_unreadable"))
        let entries = try await AdminAPITests().send(system, "GET", "/admin/api/dead?q=webhook").json?["entries"]?.arrayValue ?? []
        let entry = try #require(entries.first { $0["webhook"]?["endpoint_id"]?.stringValue == endpoint.canonical })
        #expect(entry["kind"]?.stringValue == "webhook" && entry["webhook"]?["event_type"]?.stringValue == "subscription.started")
        let id = try #require(entry["id"]?.stringValue)
        let detail = try await browser.get("/admin/dead/\(id)")
        #expect(detail.text.contains("webhook-target") && detail.text.contains(endpoint.canonical))

        // The operator re-seals the secret (a rotation with the right key) and retries: delivered, signed.
        let rotated = try await AdminAPITests().send(system, "POST", "/admin/api/webhooks/\(endpoint.canonical)/rotate-secret")
        receiver.setSecret(try #require(rotated.json?["secret"]?.stringValue))
        let retried = try await browser.post("/admin/dead/retry", [("csrf", list.csrf ?? ""), ("all", "1"), ("q", endpoint.canonical)])
        #expect(retried.location?.contains("done=retried&count=1") == true)
        #expect(try await eventually { receiver.deliveries.contains { $0.type == "subscription.started" && $0.status == 200 } })
        #expect(receiver.deliveries.allSatisfy { $0.signatureValid })
        #expect(try await eventually { try deliveryRows(system) == ["subscription.started delivered 1 -"] })
    }
}
