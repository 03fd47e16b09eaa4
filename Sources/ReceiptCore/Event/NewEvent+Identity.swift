import Foundation

extension NewEvent {
    /// Which side of a transfer an event is sent to.
    public enum TransferSide: String, Sendable {
        /// The user who had the transaction and lost it.
        case from
        /// The user who presented it and has it now.
        case to
    }

    /// A transaction moved from one user to another under `transfer_to_latest`: one event for each
    /// side (`userIdentifier` is that side's user), filed under the subscription when the
    /// transaction is one, else under the purchase.
    public static func transferred(
        purchase: InAppPurchase, environment: String, appID: UUID, from: String, to: String, side: TransferSide, receiptID: UUID?,
        occurredAt: Date, id: UUID
    ) -> NewEvent {
        var writer = JSONWriter(capacity: 1024)
        writer.openObject()
        writer.member("from_user_identifier", from)
        writer.key("purchase")
        InAppPurchaseResource(purchase, environment: environment).write(to: &writer)
        writer.member("rule", TransferRule.transferToLatest.rawValue)
        writer.member("side", side.rawValue)
        writer.member("to_user_identifier", to)
        writer.closeObject()
        let subject =
            purchase.expiresDate != nil ? "subscription:\(purchase.originalTransactionID)" : "purchase:\(purchase.transactionID)"
        return NewEvent(
            id: id, type: .customerTransferred, appID: appID, environment: environment, userIdentifier: side == .from ? from : to,
            subject: subject, originalTransactionID: purchase.originalTransactionID, transactionID: purchase.transactionID,
            receiptID: receiptID, occurredAt: occurredAt, data: String(decoding: writer.bytes, as: UTF8.self),
            dedupeKey: "transfer:\(environment):\(purchase.transactionID):\(from):\(to):\(side.rawValue)")
    }

    /// Two user ids merged into one customer: filed under the customer, stated once per alias.
    public static func aliased(alias: String, userIdentifier: String, movedPurchases: Int, appID: UUID, occurredAt: Date, id: UUID) -> NewEvent {
        var writer = JSONWriter(capacity: 256)
        writer.openObject()
        writer.member("alias", alias)
        writer.member("moved_purchases", movedPurchases)
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
        return customer(
            .customerAliased, userIdentifier, data: writer, dedupeKey: "alias:\(alias):\(userIdentifier)", appID: appID, at: occurredAt, id: id)
    }

    /// An event filed under the customer `userIdentifier` (subject `customer:<user>`), of no environment or transaction.
    private static func customer(
        _ type: EventType, _ userIdentifier: String, data: JSONWriter, dedupeKey: String, appID: UUID, at occurredAt: Date, id: UUID
    ) -> NewEvent {
        NewEvent(
            id: id, type: type, appID: appID, environment: nil, userIdentifier: userIdentifier, subject: "customer:\(userIdentifier)",
            originalTransactionID: nil, transactionID: nil, receiptID: nil, occurredAt: occurredAt,
            data: String(decoding: data.bytes, as: UTF8.self), dedupeKey: dedupeKey)
    }
}

extension NewEvent {
    /// An operator erased the customer: filed under the customer, stated once per erasure. It names
    /// the id the backend asked to erase (the backend's own id for its user) and the erasure's id,
    /// nothing else: the merged ids and everything held were erased.
    public static func erased(userIdentifier: String, erasureID: UUID, appID: UUID, occurredAt: Date, id: UUID) -> NewEvent {
        var writer = JSONWriter(capacity: 128)
        writer.openObject()
        writer.member("erasure_id", erasureID.canonical)
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
        return customer(
            .customerErased, userIdentifier, data: writer, dedupeKey: "erasure:\(erasureID.canonical)", appID: appID, at: occurredAt, id: id)
    }
}
