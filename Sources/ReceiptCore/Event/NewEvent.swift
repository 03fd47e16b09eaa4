import Foundation

/// An event about to be written, in the transaction of its change: everything but the sequence
/// number and the commit time, which the store assigns.
public struct NewEvent: Sendable, Equatable {
    public var id: UUID
    public var type: EventType
    public var appID: UUID
    public var environment: String?
    public var userIdentifier: String?
    public var subject: String
    public var originalTransactionID: String?
    public var transactionID: String?
    public var receiptID: UUID?
    public var occurredAt: Date
    /// The `data` member, JSON text.
    public var data: String
    /// Set for changes that can be stated only once whatever job reveals them (a receipt's verdict,
    /// a purchase's refund): a second event with the same key is not written.
    public var dedupeKey: String?

    /// The event for a receipt the backend posted reaching Apple's verdict (or being found forged);
    /// nil for a status that is no verdict (`pending`, `failed`).
    public static func receipt(_ resource: ReceiptResource, id: UUID, appID: UUID, occurredAt: Date) -> NewEvent? {
        let type: EventType
        switch resource.validationStatus {
        case .valid: type = .receiptValidated
        case .invalid: type = .receiptInvalid
        case .fraud: type = .receiptFraud
        case .pending, .failed: return nil
        }
        var writer = JSONWriter(capacity: 1024)
        writer.openObject()
        writer.key("receipt")
        writer.raw(resource.encoded())
        writer.closeObject()
        return NewEvent(
            id: id, type: type, appID: appID, environment: resource.environment, userIdentifier: resource.userIdentifier,
            subject: "receipt:\(resource.id.canonical)", originalTransactionID: nil, transactionID: resource.transactionID,
            receiptID: resource.id, occurredAt: occurredAt, data: String(decoding: writer.bytes, as: UTF8.self),
            dedupeKey: "receipt:\(resource.id.canonical):\(type.rawValue)")
    }

    /// The events a subscription's change means (see ``SubscriptionChange/between(_:_:)``), each
    /// with the subscription after the change and the fields that changed.
    /// - Parameters:
    ///   - transaction: the subscription's latest transaction as the change stated it, when the
    ///     change carried it: its price, currency and offer go in the event as `transaction`.
    ///   - ids: makes the events' ids (UUIDv7, in order).
    public static func subscription(
        before: SubscriptionState?, after: SubscriptionResource, transaction: InAppPurchase? = nil, appID: UUID, at now: Date,
        ids: () -> UUID
    ) -> [NewEvent] {
        let changes = SubscriptionChange.between(before, after.state)
        guard !changes.isEmpty else { return [] }
        var writer = JSONWriter(capacity: 2048)
        writer.openObject()
        writer.key("changes")
        writer.openObject()
        for field in SubscriptionChange.fields(before, after.state) {
            writer.key(field.name)
            writer.openObject()
            writer.member("from", field.from)
            writer.member("to", field.to)
            writer.closeObject()
        }
        writer.closeObject()
        writer.key("subscription")
        after.write(to: &writer, at: now, sandboxPolicy: .accept)
        if let transaction, transaction.transactionID == after.state.latestTransactionID {
            writer.key("transaction")
            InAppPurchaseResource(transaction, environment: after.environment).write(to: &writer)
        }
        writer.closeObject()
        let data = String(decoding: writer.bytes, as: UTF8.self)
        return changes.map { change in
            NewEvent(
                id: ids(), type: change.type, appID: appID, environment: after.environment, userIdentifier: after.userIdentifier,
                subject: "subscription:\(after.state.originalTransactionID)", originalTransactionID: after.state.originalTransactionID,
                transactionID: after.state.latestTransactionID, receiptID: after.receiptID, occurredAt: change.occurredAt, data: data,
                dedupeKey: nil)
        }
    }

    /// A one-time purchase refunded (wholly or in part) or revoked, with the amounts refunded, or
    /// claimed by a second user (`conflictUser`).
    public static func purchase(
        _ type: EventType, purchase: InAppPurchase, environment: String, appID: UUID, userIdentifier: String?, conflictUser: String?,
        receiptID: UUID?, occurredAt: Date, id: UUID
    ) -> NewEvent {
        var writer = JSONWriter(capacity: 1024)
        writer.openObject()
        writer.member("cancellation_reason", purchase.cancellationReason)
        writer.member("conflict_user_identifier", conflictUser)
        if type == .purchaseRefunded {
            // The refund's amounts beside the purchase, so a backend books it without reading on.
            let revocation = purchase.revocation
            writer.member("currency", revocation?.amountMilli == nil ? nil : purchase.price?.currency.rawValue)
            writer.key("purchase")
            InAppPurchaseResource(purchase, isConflict: conflictUser != nil, environment: environment).write(to: &writer)
            writer.member("refunded_milli", revocation?.amountMilli)
            writer.member("refunded_quantity", revocation?.quantity)
            writer.member("remaining_quantity", purchase.remainingQuantity)
            writer.member("revocation_percentage", revocation?.percentageMilli)
            writer.member("revocation_type", revocation?.kind?.rawValue)
        } else {
            writer.key("purchase")
            InAppPurchaseResource(purchase, isConflict: conflictUser != nil, environment: environment).write(to: &writer)
        }
        writer.closeObject()
        return NewEvent(
            id: id, type: type, appID: appID, environment: environment, userIdentifier: userIdentifier,
            subject: "purchase:\(purchase.transactionID)", originalTransactionID: purchase.originalTransactionID,
            transactionID: purchase.transactionID, receiptID: receiptID, occurredAt: occurredAt, data: String(decoding: writer.bytes, as: UTF8.self),
            dedupeKey: "purchase:\(environment):\(purchase.transactionID):\(type.rawValue)\(conflictUser.map { ":\($0)" } ?? "")"
                // Each further share of a prorated refund is news of its own.
                + (purchase.cancellationDate == nil ? purchase.revocation?.percentageMilli.map { ":\($0)" } ?? "" : ""))
    }

    /// A parent's withdrawn consent (`RESCIND_CONSENT`), about the app transaction it names and the
    /// user who stored it (nil: no app transaction with that id was stored), stated once per
    /// notification.
    public static func consentRescinded(
        notificationUUID: String, appTransactionID: String?, appID: UUID, environment: String?, userIdentifier: String?,
        occurredAt: Date, id: UUID
    ) -> NewEvent {
        var writer = JSONWriter(capacity: 256)
        writer.openObject()
        writer.member("app_transaction_id", appTransactionID)
        writer.member("notification_uuid", notificationUUID)
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
        return NewEvent(
            id: id, type: .consentRescinded, appID: appID, environment: environment, userIdentifier: userIdentifier,
            subject: appTransactionID.map { "app_transaction:\($0)" } ?? "notification:\(notificationUUID)", originalTransactionID: nil,
            transactionID: nil, receiptID: nil, occurredAt: occurredAt, data: String(decoding: writer.bytes, as: UTF8.self),
            dedupeKey: "consent:\(notificationUUID)")
    }
}

extension NewEvent {
    /// What a webhook delivery waits on: the user's events reach an endpoint one at a time, in
    /// order (a subscription's, and a receipt's verdict before its subscription's start); without a
    /// user, the subject's.
    public var orderingKey: String {
        userIdentifier.map { "user:\($0)" } ?? "\(environment ?? ""):\(subject)"
    }
}

/// UUIDv7 ids that also sort in the order they were made within one millisecond (RFC 9562's
/// monotonic random): the events of one transaction keep the order they were derived in.
public struct MonotonicEventIDs {
    private var last: (ms: UInt64, low: UInt64, high: UInt16)?
    private var generator: any RandomNumberGenerator

    /// Creates a generator.
    public init(generator: any RandomNumberGenerator = SystemRandomNumberGenerator()) {
        self.generator = generator
    }

    /// The next id for `date`: after every id made before (at the same or an earlier millisecond).
    public mutating func next(at date: Date) -> UUID {
        var ms = UInt64(max(0, date.timeIntervalSince1970 * 1000))
        var high: UInt16
        var low: UInt64
        if let last, ms <= last.ms {
            // Same (or a clock-stepped-back) millisecond: one past the previous id. No random bits
            // are drawn for it: each draw is a `getrandom` call, and a batch's events share a time.
            ms = last.ms
            high = last.high
            low = last.low &+ 1
            if low > UInt64.max >> 2 {
                low = 0
                high = (high + 1) & 0x0FFF
            }
        } else {
            high = UInt16.random(in: 0...0x0FFF, using: &generator)
            low = UInt64.random(in: 0...(UInt64.max >> 2), using: &generator)
        }
        last = (ms, low, high)
        func byte(_ value: UInt64, _ shift: UInt64) -> UInt8 { UInt8(truncatingIfNeeded: value >> shift) }
        return UUID(
            uuid: (
                byte(ms, 40), byte(ms, 32), byte(ms, 24), byte(ms, 16), byte(ms, 8), byte(ms, 0),
                0x70 | UInt8(high >> 8), UInt8(truncatingIfNeeded: high),
                0x80 | byte(low, 56), byte(low, 48), byte(low, 40), byte(low, 32), byte(low, 24), byte(low, 16), byte(low, 8), byte(low, 0)
            ))
    }
}
