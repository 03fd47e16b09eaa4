import Foundation
import Hummingbird
import ReceiptCore

/// The webhooks page: every endpoint with its state (active, failing since, paused) and its
/// undelivered and dead deliveries; admins also register, pause, resume, test, rotate and remove.
/// A new secret is shown once, on the answer to the form that made it, never in a URL.
extension AdminPages {
    func addWebhookRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        router.get("/admin/webhooks") { request, context in
            await page(request, context: context) { user, session in
                try await webhooksPage(user: user, session: session, notice: Self.webhookNotice(request.uri.queryParameters))
            }
        }
        router.post("/admin/webhooks/add") { request, context in
            try await withForm(request, context: context, role: .admin) { form, user, session in
                try await addWebhook(form, user: user, session: session)
            }
        }
        router.post("/admin/webhooks/{id}/{action}") { request, context in
            try await withForm(request, context: context, role: .admin) { form, user, session in
                guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)), let action = context.parameters.get("action"),
                    AdminAPI.webhookActions.contains(action)
                else { return try await webhooksPage(user: user, session: session, status: .notFound, notice: ("No such endpoint.", true)) }
                return try await webhookAction(action, id: id, form: form, user: user, session: session)
            }
        }
    }

    private func webhooksPage(
        user: Operator, session: AdminSessions.Session, status: HTTPResponse.Status = .ok, notice: (text: String, isProblem: Bool)? = nil,
        extra: [String: Any] = [:]
    ) async throws -> Response {
        guard let webhooks else { return Self.plain(.notFound, "no webhooks here") }
        var values = base(user, session)
        values["webhooksCurrent"] = true
        let endpoints = try await webhooks.endpoints(appID: nil)
        let at = now()
        values["empty"] = endpoints.isEmpty
        values["endpoints"] = endpoints.map { endpoint -> [String: Any] in
            var item: [String: Any] = [
                "id": endpoint.id.canonical, "app": endpoint.appName, "url": endpoint.url,
                "events": endpoint.eventTypes.isEmpty ? "every event" : endpoint.eventTypes.joined(separator: ", "),
                "unsettled": endpoint.unsettled, "dead": endpoint.dead, "paused": endpoint.pausedAt != nil,
                "created": Self.utc(endpoint.createdAt), "privateAllowed": endpoint.allowPrivate,
            ]
            item["description"] = endpoint.description
            if let paused = endpoint.pausedAt {
                item["state"] = "paused"
                item["since"] = "paused \(Self.relative(paused, now: at))"
            } else if let failing = endpoint.failingSince {
                item["state"] = "failing"
                item["since"] = "failing since \(Self.relative(failing, now: at))"
            } else {
                item["state"] = "active"
            }
            return item
        }
        let known = (try? await apps()) ?? []
        values["apps"] = known.map { ["id": $0.id.canonical, "name": $0.name] }
        values["hasApps"] = !known.isEmpty
        values["eventTypes"] = EventType.allCases.map(\.rawValue).joined(separator: ", ")
        if let notice { values[notice.isProblem ? "problem" : "notice"] = notice.text }
        values.merge(extra) { $1 }
        return html(status, "webhooks", values)
    }

    private func addWebhook(_ form: FormFields, user: Operator, session: AdminSessions.Session) async throws -> Response {
        guard let webhooks else { return Self.plain(.notFound, "no webhooks here") }
        guard let appID = form["app_id"].flatMap(UUID.init(uuidString:)) else {
            return try await webhooksPage(user: user, session: session, status: .unprocessableContent, notice: ("Choose an app.", true))
        }
        let events = (form["events"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let description = form["description"].flatMap { $0.isEmpty ? nil : String($0.prefix(500)) }
        do {
            let (id, secret) = try await webhooks.add(
                appID: appID, url: form["url"] ?? "", eventTypes: events, allowPrivate: form["allow_private"] == "1", description: description,
                audit: user.audit("webhook.add", source: "dashboard"))
            return try await webhooksPage(
                user: user, session: session, notice: ("Endpoint \(id.canonical) registered.", false),
                extra: ["secret": secret, "secretEndpoint": id.canonical])
        } catch let error as WebhookAdminError {
            return try await webhooksPage(user: user, session: session, status: .unprocessableContent, notice: (error.description, true))
        }
    }

    private func webhookAction(
        _ action: String, id: UUID, form: FormFields, user: Operator, session: AdminSessions.Session
    ) async throws -> Response {
        guard let webhooks else { return Self.plain(.notFound, "no webhooks here") }
        let audit = user.audit("webhook.\(action.replacingOccurrences(of: "-", with: "_"))", source: "dashboard")
        do {
            switch action {
            case "pause", "resume":
                try await webhooks.setPaused(id: id, action == "pause", audit: audit)
                return redirect("/admin/webhooks?done=\(action == "pause" ? "paused" : "resumed")")
            case "remove":
                guard form["confirm"] == "1" else { return redirect("/admin/webhooks?done=unconfirmed") }
                try await webhooks.remove(id: id, audit: audit)
                return redirect("/admin/webhooks?done=removed")
            case "rotate-secret":
                let secret = try await webhooks.rotateSecret(id: id, overlap: 24 * 3600, audit: audit)
                return try await webhooksPage(
                    user: user, session: session,
                    notice: ("A new secret for \(id.canonical): the old one keeps signing too for 24 hours.", false),
                    extra: ["secret": secret, "secretEndpoint": id.canonical])
            default:
                let report = try await actions.run(audit.with(target: id.canonical)) { try await webhooks.test(id: id) }
                let text =
                    report.isDelivered
                    ? "Test delivery to \(id.canonical): HTTP \(report.httpStatus ?? 0) in \(report.latencyMs) ms."
                    : "Test delivery to \(id.canonical) failed: \(report.errorCode?.rawValue ?? "unknown") after \(report.latencyMs) ms."
                return try await webhooksPage(user: user, session: session, notice: (text, !report.isDelivered))
            }
        } catch let error as WebhookAdminError {
            return try await webhooksPage(
                user: user, session: session, status: error.code == .notFound ? .notFound : .unprocessableContent,
                notice: (error.description, true))
        }
    }

    /// The message a webhook action's redirect asks for: a fixed text, never one from the URL.
    static func webhookNotice(_ query: Parameters) -> (text: String, isProblem: Bool)? {
        switch query.get("done") {
        case "paused": ("Paused: its events wait, none is lost.", false)
        case "resumed": ("Resumed: the events that waited go out, in order.", false)
        case "removed": ("Removed, with its undelivered deliveries.", false)
        case "unconfirmed": ("Nothing was removed: tick “yes, remove it”.", true)
        default: nil
        }
    }
}
