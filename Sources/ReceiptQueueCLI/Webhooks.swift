import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

struct WebhooksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhooks", abstract: "The endpoints of your backend that events are delivered to, signed.",
        discussion: """
            Every event (receipt.validated, subscription.renewed, purchase.refunded, …) is posted to each endpoint of its app
            whose filter takes it, with `Receiptq-Signature: t=…,v1=…` (HMAC-SHA256 of "<t>.<body>" with the endpoint's secret),
            retried with backoff for 3 days, in order per user. See the README's "Events and webhooks".
            """,
        subcommands: [Add.self, List.self, Remove.self, Test.self, RotateSecret.self, Pause.self, Resume.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Registers an endpoint and prints its signing secret (once).")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The endpoint: https://… (http:// only with --allow-private).") var url: String
        @Option(
            name: .customLong("events"),
            help: "Event types or families, comma-separated (subscription.renewed,purchase.*); default: every event.")
        var events: String?
        @Flag(help: "Allow loopback, private and link-local addresses (a receiver inside your network).") var allowPrivate = false
        @Option(help: "A note for operators.") var description: String?

        func run() async throws {
            let admin = try webhooksAdmin()
            defer { admin.close() }
            let record = try admin.requiredApp(named: app)
            let privateHost: String?
            do {
                privateHost = try admin.privateWebhookHost(url: url, allowPrivate: allowPrivate)
            } catch let error as WebhookAdminError {
                throw ValidationError(error.description)
            }
            if let host = privateHost {
                throw ValidationError("\(host) resolves to a loopback, private or link-local address; pass --allow-private if it is meant to")
            }
            let types = events.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []
            do {
                let (id, secret) = try admin.addWebhook(
                    appID: record.id, url: url, eventTypes: types, allowPrivate: allowPrivate, description: description,
                    audit: AuditAction.commandLine("webhook.add"))
                print("endpoint: \(id.canonical)")
                print("secret:   \(secret)")
                print("Keep the secret: it is not shown again. Verify each delivery's Receiptq-Signature with it (README: Events and webhooks).")
            } catch let error as WebhookAdminError {
                throw ValidationError(error.description)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists the endpoints (of one app), with their delivery state.")
        @Option(help: "Only this app's endpoints.") var app: String?

        func run() async throws {
            let admin = try webhooksAdmin()
            defer { admin.close() }
            let appID = try app.map { try admin.requiredApp(named: $0).id }
            let endpoints = try admin.listWebhooks(appID: appID)
            if endpoints.isEmpty { print("No webhook endpoints.") }
            for endpoint in endpoints {
                let state =
                    endpoint.pausedAt.map { "paused since \($0)" } ?? endpoint.failingSince.map { "failing since \($0)" } ?? "active"
                print(
                    "\(endpoint.id.canonical)  \(endpoint.appName)  \(endpoint.url)  events: \(endpoint.eventTypes.isEmpty ? "all" : endpoint.eventTypes.joined(separator: ","))  \(state)  unsettled: \(endpoint.unsettled)  dead: \(endpoint.dead)\(endpoint.allowPrivate ? "  private allowed" : "")"
                )
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Removes an endpoint and its undelivered deliveries.")
        @Option(help: "The endpoint's id.") var id: String

        func run() async throws {
            try withEndpoint(id) { admin, uuid in
                try admin.removeWebhook(id: uuid, audit: AuditAction.commandLine("webhook.remove"))
                print("Removed \(uuid.canonical).")
            }
        }
    }

    struct RotateSecret: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-secret", abstract: "Issues a new secret; the old one keeps signing too for --overlap-hours.")
        @Option(help: "The endpoint's id.") var id: String
        @Option(help: "Hours both secrets sign each delivery.") var overlapHours: Int = 24

        func run() async throws {
            try withEndpoint(id) { admin, uuid in
                let secret = try admin.rotateWebhookSecret(
                    id: uuid, overlap: TimeInterval(max(0, overlapHours) * 3600), audit: AuditAction.commandLine("webhook.rotate_secret"))
                print("secret:   \(secret)")
                print("Both secrets sign every delivery for \(overlapHours) h: switch your receiver to the new one within that time.")
            }
        }
    }

    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stops deliveries to an endpoint; its events wait, none is lost.")
        @Option(help: "The endpoint's id.") var id: String

        func run() async throws { try await setPaused(id, true) }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Resumes a paused endpoint: the events that waited go out, in order.")
        @Option(help: "The endpoint's id.") var id: String

        func run() async throws { try await setPaused(id, false) }
    }

    struct Test: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sends a signed `webhook.test` delivery now and prints the endpoint's answer.",
            discussion: "Exit 0 on a 2xx, 1 otherwise. Nothing is stored and no event is created.")
        @Option(help: "The endpoint's id.") var id: String

        func run() async throws {
            let (endpoint, admin) = try withEndpoint(id) { admin, uuid in
                guard let endpoint = try admin.webhookEndpoint(id: uuid) else { throw ValidationError("no such endpoint") }
                return (endpoint, admin)
            }
            guard !endpoint.secrets.isEmpty else { throw ValidationError("the endpoint's secret cannot be opened: check RECEIPTQ_SECRETS_KEY") }
            // Its connection is closed by now; the delivery needs none.
            let report = try await admin.sendTestWebhook(to: endpoint)
            if report.isDelivered {
                print("Delivered: HTTP \(report.httpStatus ?? 0) in \(report.latencyMs) ms.")
            } else {
                print("Not delivered: \(report.errorCode?.rawValue ?? "unknown") after \(report.latencyMs) ms.")
                throw ExitCode(1)
            }
        }
    }
}

private func setPaused(_ id: String, _ paused: Bool) async throws {
    try withEndpoint(id) { admin, uuid in
        try admin.setWebhookPaused(id: uuid, paused, audit: AuditAction.commandLine(paused ? "webhook.pause" : "webhook.resume"))
        print(paused ? "Paused \(uuid.canonical): its events wait." : "Resumed \(uuid.canonical).")
    }
}

/// The administration of a `webhooks` command; the caller closes it.
private func webhooksAdmin() throws -> ReceiptQueueApp.Admin {
    try ReceiptQueueApp.Runtime.bootstrap(label: "webhooks").admin(label: "webhooks")
}

/// What every command on one endpoint starts with: the administration (with the secrets key, when
/// set) and the endpoint id; its errors as the CLI's. The connection is closed when `body` returns.
private func withEndpoint<T>(_ id: String, _ body: (ReceiptQueueApp.Admin, UUID) throws -> T) throws -> T {
    let admin = try webhooksAdmin()
    defer { admin.close() }
    guard let uuid = UUID(uuidString: id) else { throw ValidationError("--id is an endpoint id (a UUID)") }
    do {
        return try body(admin, uuid)
    } catch let error as WebhookAdminError {
        throw ValidationError(error.description)
    }
}
