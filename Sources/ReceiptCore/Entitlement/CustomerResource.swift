import Foundation

/// One named entitlement a user holds right now, with what holds it.
public struct NamedEntitlement: Sendable, Equatable {
    /// What holds an entitlement.
    public struct Source: Sendable, Equatable {
        public enum Kind: String, Sendable {
            case purchase, subscription, grant
        }

        public var kind: Kind
        /// The product bought (nil for a grant).
        public var productID: String?
        /// The purchase's transaction id, the subscription's original transaction id, or the grant's id.
        public var reference: String
        /// Until when this source entitles; nil: for good (a non-consumable, a grant without end).
        public var expiresAt: Date?
        public var environment: String?
    }

    /// The entitlement's id in the app's catalogue.
    public var id: String
    /// The latest expiry of its sources; nil when one of them entitles for good.
    public var expiresAt: Date?
    /// The catalogue's products for it.
    public var products: [String]
    public var sources: [Source]
}

/// A customer as the client API answers `GET /client/customers/{user}`: the named entitlements
/// the user holds now (from the app's catalogue, their purchases and subscriptions, and operators'
/// grants), with the purchases, subscriptions and grants behind them.
public struct CustomerResource: Sendable, Equatable {
    public var holdings: UserEntitlements
    public var catalogue: [EntitlementDefinition]
    public var grants: [EntitlementGrant]

    /// Creates the resource.
    public init(holdings: UserEntitlements, catalogue: [EntitlementDefinition], grants: [EntitlementGrant]) {
        self.holdings = holdings
        self.catalogue = catalogue
        self.grants = grants
    }

    /// The entitlements held at `now`, by id. Under the `reject` sandbox policy sandbox purchases
    /// grant nothing; revoked, cancelled and conflicting purchases never do.
    public func entitlements(at now: Date, sandboxPolicy: SandboxPolicy) -> [NamedEntitlement] {
        var sourcesByProduct: [String: [NamedEntitlement.Source]] = [:]
        for subscription in holdings.subscriptions where subscription.state.isEntitled(at: now) {
            if sandboxPolicy == .reject && subscription.environment == "sandbox" { continue }
            let state = subscription.state
            let until = state.status == .grace ? state.gracePeriodExpiresAt : state.expiresAt
            sourcesByProduct[state.productID, default: []].append(
                .init(
                    kind: .subscription, productID: state.productID, reference: state.originalTransactionID, expiresAt: until,
                    environment: subscription.environment))
        }
        // A subscription's own transactions are in the purchases too: its subscription row is the
        // source that knows about renewals, grace and refunds.
        let subscribed = Set(holdings.subscriptions.map(\.state.originalTransactionID))
        for purchase in holdings.purchases where purchase.cancellationDate == nil && !purchase.isConflict {
            if sandboxPolicy == .reject && purchase.environment == "sandbox" { continue }
            let until = purchase.expiresDate?.date
            if let until, until <= now { continue }
            if subscribed.contains(purchase.originalTransactionID) { continue }
            sourcesByProduct[purchase.productID, default: []].append(
                .init(
                    kind: .purchase, productID: purchase.productID, reference: purchase.transactionID, expiresAt: until,
                    environment: purchase.environment))
        }
        var result: [NamedEntitlement] = []
        for definition in catalogue.sorted(by: { $0.id < $1.id }) {
            var sources = definition.products.flatMap { sourcesByProduct[$0] ?? [] }
            for grant in grants where grant.entitlement == definition.id && grant.isActive(at: now) {
                sources.append(.init(kind: .grant, productID: nil, reference: grant.id.canonical, expiresAt: grant.expiresAt, environment: nil))
            }
            guard !sources.isEmpty else { continue }
            let expiresAt: Date? = sources.contains { $0.expiresAt == nil } ? nil : sources.compactMap(\.expiresAt).max()
            result.append(NamedEntitlement(id: definition.id, expiresAt: expiresAt, products: definition.products, sources: sources))
        }
        return result
    }

    /// JSON bytes as of `now` (sorted keys; absent values omitted): `entitlements` by name, then
    /// the user's `grants`, `purchases` and `subscriptions` as `GET /client/subscriptions` lists them.
    public func encoded(at now: Date, sandboxPolicy: SandboxPolicy) -> [UInt8] {
        func time(_ date: Date?) -> APITimestamp? { date.map(APITimestamp.init) }
        var writer = JSONWriter(capacity: 1024 + holdings.subscriptions.count * 1024 + holdings.purchases.count * 512)
        writer.openObject()
        writer.key("entitlements")
        writer.openArray()
        for entitlement in entitlements(at: now, sandboxPolicy: sandboxPolicy) {
            writer.openObject()
            writer.member("expires_date", time(entitlement.expiresAt))
            writer.member("id", entitlement.id)
            writer.member("is_active", true)
            writer.key("products")
            writer.openArray()
            for product in entitlement.products { writer.string(product) }
            writer.closeArray()
            writer.key("sources")
            writer.openArray()
            for source in entitlement.sources {
                writer.openObject()
                writer.member("environment", source.environment)
                writer.member("expires_date", time(source.expiresAt))
                writer.member("product_id", source.productID)
                writer.member("reference", source.reference)
                writer.member("type", source.kind.rawValue)
                writer.closeObject()
            }
            writer.closeArray()
            writer.closeObject()
        }
        writer.closeArray()
        writer.key("grants")
        writer.openArray()
        for grant in grants.sorted(by: { $0.grantedAt > $1.grantedAt }) { grant.write(to: &writer, at: now) }
        writer.closeArray()
        writer.key("purchases")
        writer.openArray()
        for purchase in holdings.purchases { purchase.write(to: &writer, flagged: sandboxPolicy.flags(environment: purchase.environment)) }
        writer.closeArray()
        writer.member("sandbox_policy", sandboxPolicy.rawValue)
        writer.key("subscriptions")
        writer.openArray()
        for subscription in holdings.subscriptions { subscription.write(to: &writer, at: now, sandboxPolicy: sandboxPolicy) }
        writer.closeArray()
        writer.member("user_identifier", holdings.userIdentifier)
        writer.closeObject()
        return writer.bytes
    }
}

extension EntitlementGrant {
    /// The grant as the APIs and its events show it.
    public func encoded(at now: Date) -> [UInt8] {
        var writer = JSONWriter(capacity: 512)
        write(to: &writer, at: now)
        return writer.bytes
    }

    func write(to writer: inout JSONWriter, at now: Date) {
        func time(_ date: Date?) -> APITimestamp? { date.map(APITimestamp.init) }
        writer.openObject()
        writer.member("entitlement", entitlement)
        writer.member("expires_date", time(expiresAt))
        writer.member("granted_at", time(grantedAt))
        writer.member("granted_by", grantedBy)
        writer.member("id", id.canonical)
        writer.member("is_active", isActive(at: now))
        writer.member("reason", reason)
        writer.member("revoked_at", time(revokedAt))
        writer.member("revoked_by", revokedBy)
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
    }
}

extension NewEvent {
    /// A grant's event (`entitlement.granted`, `entitlement.revoked`): the grant as it is after
    /// the change, ordered with the user's other events, stated once per grant and type.
    public static func grant(_ type: EventType, _ grant: EntitlementGrant, appID: UUID, id: UUID, at: Date) -> NewEvent {
        var writer = JSONWriter(capacity: 512)
        writer.openObject()
        writer.key("grant")
        writer.raw(grant.encoded(at: at))
        writer.closeObject()
        return NewEvent(
            id: id, type: type, appID: appID, environment: nil, userIdentifier: grant.userIdentifier, subject: "grant:\(grant.id.canonical)",
            originalTransactionID: nil, transactionID: nil, receiptID: nil, occurredAt: at, data: String(decoding: writer.bytes, as: UTF8.self),
            dedupeKey: "grant:\(grant.id.canonical):\(type.rawValue)")
    }
}
