import Foundation
import Hummingbird
import ReceiptCore

/// The customer view: what support staff open when a customer writes in. A user identifier (or a
/// transaction id) → their receipts, purchases, subscriptions with their state, events, webhook
/// deliveries and Apple calls, on one page. Receipts' bytes, secrets and tokens are never shown.
extension AdminPages {
    func addCustomerRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        router.get("/admin/customers") { request, context in
            await page(request, context: context) { user, session in try await customerPage(request, user: user, session: session) }
        }
    }

    private func customerPage(_ request: Request, user: Operator, session: AdminSessions.Session) async throws -> Response {
        var values = base(user, session)
        values["customersCurrent"] = true
        let known = (try? await apps()) ?? []
        let names = Dictionary(known.map { ($0.id, $0.name) }) { first, _ in first }
        let (query, term, by, problem) = Self.customerQuery(request)
        values["q"] = term
        values["byTransaction"] = by == "transaction"
        values["by"] = by
        values["canResync"] = resync != nil && user.role >= .operator
        if let notice = Self.resyncNotice(request.uri.queryParameters["resync"].map(String.init)) {
            values[notice.isProblem ? "problem" : "notice"] = notice.text
        }
        if let notice = Self.erasureNotice(request.uri.queryParameters["erased"].map(String.init)) {
            values[notice.isProblem ? "problem" : "notice"] = notice.text
        }
        // Erasing needs one app and one user: the button shows for an operator's search by user in an app.
        if eraser != nil, user.role >= .operator, by != "transaction", let appID = query.appID, let customer = query.userIdentifier {
            values["erase"] = ["appID": appID.canonical, "user": customer]
        }
        values["hasApps"] = !known.isEmpty
        values["apps"] = known.map { app -> [String: Any] in
            ["id": app.id.canonical, "name": app.name, "bundleID": app.bundleID, "selected": app.id == query.appID]
        }
        values["supportApps"] = Self.supportApps(known, among: query.appID.map { [$0] }, selected: query.appID)
        if support != nil, !known.isEmpty {
            values["hasSupport"] = true
            let massExtensions = try await massExtensionRows(appID: query.appID)
            values["massExtensions"] = massExtensions
            values["hasMassExtensions"] = !massExtensions.isEmpty
            if user.role >= .operator {
                values["supportForms"] = [
                    "forms": Self.supportForms(user: by == "transaction" ? "" : term, transaction: by == "transaction" ? term : "")
                ]
            }
        }
        if let problem {
            values["problem"] = problem
            return html(.unprocessableContent, "customer", values)
        }
        guard let customers, query.userIdentifier != nil || query.transactionID != nil else { return html(.ok, "customer", values) }
        // Support staff reading a customer's records is itself an action worth a line.
        let lookup = user.audit(
            "customer.lookup", source: "dashboard", target: "\(by == "transaction" ? "transaction" : "user") \(term)", appID: query.appID,
            users: query.userIdentifier.map { [$0] } ?? [])
        let found = try await actions.run(lookup) { try await customers.customer(query) }
        let audit = try await auditEntries(for: found.userIdentifiers)
        let at = now()
        values["searched"] = true
        values["found"] = !found.isEmpty
        values["users"] = found.userIdentifiers.joined(separator: ", ")
        values.merge(Self.customerRows(found, appNames: names, now: at)) { $1 }
        if !found.isEmpty { values["supportApps"] = Self.supportApps(known, among: found.appIDs, selected: query.appID) }
        values["audit"] = audit.map { auditValues($0, now: at) }
        for (key, list) in [
            ("Audit", audit.count),
            ("Receipts", found.receipts.count), ("Purchases", found.purchases.count), ("Subscriptions", found.subscriptions.count),
            ("Events", found.events.count), ("Deliveries", found.deliveries.count), ("Calls", found.calls.count),
        ] {
            values["has\(key)"] = list > 0
        }
        return html(.ok, "customer", values)
    }

    /// The support forms of the customer view, pre-filled with the customer looked up.
    private static func supportForms(user: String, transaction: String) -> [[String: Any]] {
        func field(_ name: String, _ label: String, _ hint: String, value: String = "", required: Bool = true) -> [String: Any] {
            ["name": name, "label": label, "hint": hint, "value": value, "required": required]
        }
        let days = field("extend_by_days", "Days", "1–90")
        let reason = field("extend_reason_code", "Reason", "0–3", value: "1")
        return [
            [
                "action": "order-lookup", "title": "Look up an order id", "button": "Look up and store",
                "fields": [
                    field("order_id", "Order id", "from the customer's e-mail"),
                    field("user_identifier", "For user", "", value: user, required: false),
                ],
            ],
            [
                "action": "refund-history", "title": "Refund history", "button": "Show and apply",
                "fields": [field("transaction_id", "Transaction id", "any of the customer's", value: transaction)],
            ],
            [
                "action": "extend", "title": "Extend a subscription", "button": "Extend",
                "fields": [field("original_transaction_id", "Original transaction", "", value: transaction), days, reason],
            ],
            [
                "action": "mass-extend", "title": "Extend every subscriber of a product", "button": "Extend all",
                "fields": [
                    field("product_id", "Product", ""), days, reason,
                    field("storefront_country_codes", "Storefronts", "USA, FRA (empty: all)", required: false),
                ],
            ],
            [
                "action": "app-account-token", "title": "Set the app account token", "button": "Set",
                "fields": [
                    field("original_transaction_id", "Original transaction", "", value: transaction), field("app_account_token", "Token", "a UUID"),
                ],
            ],
            ["action": "test-notification", "title": "Test notification", "button": "Ask Apple to send one", "fields": [[String: Any]]()],
        ]
    }

    /// The look-up a customer page's query parameters ask for (`app_id`, `q`, `by`), the term and how
    /// it is searched, and what is wrong with them, if anything.
    private static func customerQuery(_ request: Request) -> (query: CustomerQuery, term: String, by: String, problem: String?) {
        let parameters = request.uri.queryParameters
        var query = CustomerQuery()
        var problem: String?
        if let text = parameters["app_id"].map(String.init), !text.isEmpty {
            if let id = UUID(uuidString: text) { query.appID = id } else { problem = "app_id is not an app id." }
        }
        let term = parameters["q"].map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""
        let by = parameters["by"].map(String.init) ?? "user"
        if !term.isEmpty {
            if term.unicodeScalars.count > 255 || term.unicodeScalars.contains(where: { $0.value == 0 }) {
                problem = "The search is at most 255 characters, without NUL."
            } else if by == "transaction" {
                query.transactionID = term
            } else {
                query.userIdentifier = term
            }
        }
        return (query, term, by, problem)
    }

    /// A purchase's refund as the page shows it: its kind, share, units and amount
    /// (`REFUND_PRORATED 33.333 % · 1 of 3 · 3.33 USD`); empty when none.
    static func refundText(_ purchase: CustomerRecord.Purchase) -> String {
        guard let revocation = purchase.revocation else { return "" }
        var parts = [revocation.kind?.rawValue ?? "revoked"]
        if let share = revocation.percentageMilli {
            parts[0] += " " + Money.decimalText(thousandths: Int64(share)) + " %"
        }
        if let units = revocation.quantity { parts.append("\(units) of \(purchase.quantity)") }
        if let amount = revocation.amountMilli, let currency = purchase.price?.currency {
            parts.append("\(Money(milli: amount, currency: currency).decimalText) \(currency)")
        }
        return parts.joined(separator: " · ")
    }

    /// The found records as the page's rows (apps by name, times relative to `now`).
    private static func customerRows(_ found: CustomerRecord, appNames: [UUID: String], now: Date) -> [String: Any] {
        func app(_ id: UUID) -> String { appNames[id] ?? id.canonical }
        var values: [String: Any] = [:]
        values["receipts"] = found.receipts.map { receipt -> [String: Any] in
            [
                "id": receipt.id.canonical, "app": app(receipt.appID), "status": receipt.status, "environment": receipt.environment ?? "—",
                "source": receipt.source ?? "receipt", "validatedBy": receipt.validatedBy ?? "—",
                "problem": receipt.fraudReason ?? receipt.errorCode ?? "", "createdUTC": Self.utc(receipt.createdAt),
                "createdAgo": Self.relative(receipt.createdAt, now: now), "user": receipt.userIdentifier ?? "—",
            ]
        }
        values["purchases"] = found.purchases.map { purchase -> [String: Any] in
            [
                "app": app(purchase.appID), "appID": purchase.appID.canonical, "transaction": purchase.transactionID,
                "original": purchase.originalTransactionID,
                "product": purchase.productID, "environment": purchase.environment, "user": purchase.userIdentifier ?? "—",
                "purchased": Self.utc(purchase.purchaseDate), "expires": purchase.expiresDate.map { Self.utc($0) } ?? "—",
                "refunded": purchase.cancellationDate.map { Self.utc($0) } ?? "", "conflict": purchase.conflictUserIdentifier ?? "",
                "price": purchase.price.map { "\($0.decimalText) \($0.currency)" } ?? "—", "quantity": purchase.quantity,
                "offer": [purchase.offer?.type.rawValue, purchase.offer?.identifier].compactMap { $0 }.joined(separator: " "),
                "refund": Self.refundText(purchase),
            ]
        }
        values["subscriptions"] = found.subscriptions.map { entry -> [String: Any] in
            let state = entry.resource.state
            return [
                "app": app(entry.appID), "original": state.originalTransactionID, "product": state.productID, "status": state.status.rawValue,
                "entitled": state.isEntitled(at: now), "environment": entry.resource.environment,
                "expires": Self.utc(state.expiresAt), "autoRenew": state.autoRenewStatus.map { $0 ? "on" : "off" } ?? "—",
                "nextPoll": entry.resource.nextPollAt.map { Self.relative($0, now: now) } ?? "—",
                "pollError": entry.resource.lastPollError ?? "",
            ]
        }
        values["events"] = found.events.map { event -> [String: Any] in
            [
                "id": event.id.canonical, "type": event.type.rawValue, "app": app(event.appID), "subject": event.subject,
                "sequence": event.sequence, "occurredUTC": Self.utc(event.occurredAt), "recordedAgo": Self.relative(event.recordedAt, now: now),
            ]
        }
        values["deliveries"] = found.deliveries.map { delivery -> [String: Any] in
            [
                "event": delivery.eventID.canonical, "type": delivery.eventType, "url": delivery.endpointURL, "status": delivery.status,
                "attempts": delivery.attempts, "answer": delivery.lastHTTPStatus.map { "HTTP \($0)" } ?? delivery.lastError ?? "—",
                "at": delivery.lastAttemptAt.map { Self.relative($0, now: now) } ?? "—",
            ]
        }
        values["calls"] = found.calls.map { call -> [String: Any] in
            [
                "receipt": call.receiptID.canonical, "endpoint": call.endpoint, "http": call.httpStatus.map(String.init) ?? "—",
                "apple": call.appleStatus.map(String.init) ?? "—", "latency": call.latencyMs.map { "\($0) ms" } ?? "—",
                "error": call.errorCode ?? "", "atUTC": Self.utc(call.at), "ago": Self.relative(call.at, now: now),
            ]
        }
        return values
    }

    /// The apps a support form offers: those of `among` (the customer's, or the one searched in)
    /// when known, else every app. Six forms listing every app of a deployment with thousands
    /// (the tests' shared database) made a customer's page megabytes.
    static func supportApps(_ known: [AppRecord], among: Set<UUID>?, selected: UUID?) -> [[String: Any]] {
        let offered = among.map { ids in known.filter { ids.contains($0.id) } } ?? known
        return (offered.isEmpty ? known : offered).map { ["id": $0.id.canonical, "name": $0.name, "selected": $0.id == selected] }
    }

    /// The audit lines that touched these customers (their jobs retried or deleted, their records
    /// looked up), newest first.
    private func auditEntries(for users: [String]) async throws -> [AuditEntry] {
        guard let log = actions.log else { return [] }
        var entries: [AuditEntry] = []
        for user in users.prefix(5) {
            for entry in try await log.entries(AuditFilter(userIdentifier: user), before: nil, limit: 50)
            where !entries.contains(where: { $0.id == entry.id }) {
                entries.append(entry)
            }
        }
        return entries.sorted { $0.id > $1.id }
    }
}
