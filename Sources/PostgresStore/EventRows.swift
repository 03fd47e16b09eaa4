import Foundation
import Libpq
import ReceiptCore

/// The outbox: the events a batch's changes mean, written in the batch's own transaction, with
/// one webhook delivery per event and matching endpoint. An event exists if and only if its
/// change committed; a replayed job changes nothing, so it adds no event.
enum EventRows {
    /// What one batch changed, as the upserts reported it: the input of ``events(_:resources:now:)``.
    struct Changes {
        /// Receipts whose status changed (a new row, or a new verdict), with their record's time.
        var verdicts: [(id: UUID, appID: UUID, at: Date)] = []
        /// Subscriptions the batch wrote: the state before (nil: new) and the row after.
        var subscriptions: [(appID: UUID, before: SubscriptionState?, after: SubscriptionResource)] = []
        /// One-time purchases newly refunded, and purchases newly claimed by a second user.
        var purchases: [PurchaseChange] = []
        /// `RESCIND_CONSENT` notifications newly stored, with the user their app transaction names.
        var consents: [ConsentChange] = []
        /// The subscription transactions the batch stated, by ``key(_:_:)`` of environment and
        /// transaction id: a subscription's event carries its latest one's price and offer.
        var transactions: [String: InAppPurchase] = [:]

        /// Forgets the changes these receipts brought (a quiet import's).
        mutating func drop(receipts: Set<UUID>) {
            verdicts.removeAll { receipts.contains($0.id) }
            subscriptions.removeAll { receipts.contains($0.after.receiptID) }
            purchases.removeAll { $0.receiptID.map(receipts.contains) ?? false }
        }

        mutating func merge(_ other: Changes) {
            verdicts += other.verdicts
            subscriptions += other.subscriptions
            purchases += other.purchases
            consents += other.consents
            transactions.merge(other.transactions) { _, new in new }
        }

        /// Keeps the subscription transactions of `records`, for their subscriptions' events.
        mutating func keepTransactions(of records: [ValidationRecord]) {
            for record in records {
                for purchase in record.purchases where purchase.expiresDate != nil {
                    transactions[EventRows.key(record.ledgerEnvironment, purchase.transactionID)] = purchase
                }
            }
        }
    }

    /// A parent's withdrawn consent (`RESCIND_CONSENT`), newly stored.
    struct ConsentChange {
        var appID: UUID
        var environment: String?
        var notificationUUID: String
        var appTransactionID: String?
        /// The user whose stored app transaction has that id (nil: none stored yet).
        var userIdentifier: String?
        var signedAt: Date
    }

    /// A purchase row whose refund or conflict is new.
    struct PurchaseChange {
        var type: EventType
        var appID: UUID
        var environment: String
        var purchase: InAppPurchase
        var owner: String?
        var conflictUser: String?
        /// For a transfer: the user who had it.
        var previousOwner: String? = nil
        var receiptID: UUID?
        var occurredAt: Date
    }

    /// Serializes the writers of one subscription (or one notification's purchase) across
    /// committers and worker processes for the rest of the transaction: the state read before a
    /// write is then the newest committed one, so each change is stated once ("stale" notifications
    /// and subscription events are both judged on it). Taken once per batch, in key order, so two
    /// batches never wait on each other in a cycle.
    static func lock(_ records: [ValidationRecord], on connection: PostgresConnection) throws {
        var keys = Set<String>()
        for record in records {
            let environment = record.ledgerEnvironment
            // `|`, not NUL: the keys travel as Postgres text (and a collision only serializes more).
            for planned in record.subscriptions {
                keys.insert("\(record.envelope.appID)|\(environment)|\(planned.state.originalTransactionID)")
            }
            if record.isNotification, let original = record.notificationOriginalTransactionID {
                keys.insert("\(record.envelope.appID)|\(environment)|\(original)")
            }
        }
        guard !keys.isEmpty else { return }
        _ = try connection.query(
            """
            SELECT pg_advisory_xact_lock(h) FROM (
                SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(\(PostgresBinaryArray(texts: keys.sorted()))::text[]) AS k
                ORDER BY 1) AS ordered
            """)
    }

    /// The stored states of the subscriptions `records` are about to write (read under ``lock(_:on:)``).
    static func subscriptionsBefore(_ records: [ValidationRecord], on connection: PostgresConnection) throws -> [String: SubscriptionResource] {
        var keys = ColumnBatch([.uuid, .text, .text])
        for record in records {
            let environment = record.ledgerEnvironment
            for planned in record.subscriptions {
                keys.append([.uuid(record.envelope.appID), .text(environment), .text(planned.state.originalTransactionID)])
            }
        }
        guard !keys.isEmpty else { return [:] }
        let rows = try connection.query(
            """
            SELECT \(unescaped: SubscriptionRows.columns) FROM subscriptions s
            JOIN unnest(\(keys[0])::uuid[], \(keys[1])::text[], \(keys[2])::text[]) AS k(app_id, environment, original_transaction_id)
              ON s.app_id = k.app_id AND s.environment = k.environment AND s.original_transaction_id = k.original_transaction_id
            """
        ).rows
        var states: [String: SubscriptionResource] = [:]
        for row in rows {
            guard let app = row.uuid("app_id"), let resource = SubscriptionRows.resource(row) else { continue }
            states[key(app, resource.environment, resource.state.originalTransactionID)] = resource
        }
        return states
    }

    /// The state a subscription's events are stated from: the stored one, unless nobody owned it
    /// and someone does now. Apple's notification of a new subscription (`SUBSCRIBED`,
    /// `OFFER_REDEEMED`) often comes before the device posts it: stored without an owner, its
    /// `subscription.started` went to no user, and the post that claims it, the same state,
    /// stated nothing; the owner's backend never heard it had started.
    static func stateBefore(_ stored: SubscriptionResource?, after: SubscriptionResource) -> SubscriptionState? {
        guard let stored else { return nil }
        return stored.userIdentifier == nil && after.userIdentifier != nil ? nil : stored.state
    }

    static func key(_ app: UUID, _ environment: String, _ originalTransactionID: String) -> String {
        "\(app.uuidString)|\(environment)|\(originalTransactionID)"
    }

    /// The key of one transaction in ``Changes/transactions``.
    static func key(_ environment: String, _ transactionID: String) -> String { "\(environment)|\(transactionID)" }

    /// The events of a batch's changes, in the order a backend should apply them: verdicts first,
    /// then each subscription's changes, then purchases, then withdrawn consents.
    static func events(_ changes: Changes, resources: [UUID: ReceiptResource], now: Date) -> [NewEvent] {
        var ids = MonotonicEventIDs()
        var events: [NewEvent] = []
        for verdict in changes.verdicts {
            guard let resource = resources[verdict.id],
                let event = NewEvent.receipt(resource, id: ids.next(at: now), appID: verdict.appID, occurredAt: verdict.at)
            else { continue }
            events.append(event)
        }
        for change in changes.subscriptions {
            let transaction = changes.transactions[key(change.after.environment, change.after.state.latestTransactionID)]
            events += NewEvent.subscription(before: change.before, after: change.after, transaction: transaction, appID: change.appID, at: now) {
                ids.next(at: now)
            }
        }
        // A transfer is told once per subscription (or purchase) and pair of users, to each user:
        // a receipt carries every renewal of a subscription, and each row moved.
        var transfers = Set<String>()
        for change in changes.purchases where change.type == .customerTransferred {
            guard let from = change.previousOwner, let to = change.owner,
                transfers.insert("\(change.appID)|\(change.environment)|\(change.purchase.originalTransactionID)|\(from)|\(to)").inserted
            else { continue }
            for side in [NewEvent.TransferSide.from, .to] {
                events.append(
                    NewEvent.transferred(
                        purchase: change.purchase, environment: change.environment, appID: change.appID, from: from, to: to, side: side,
                        receiptID: change.receiptID, occurredAt: change.occurredAt, id: ids.next(at: now)))
            }
        }
        for change in changes.purchases where change.type != .customerTransferred {
            events.append(
                NewEvent.purchase(
                    change.type, purchase: change.purchase, environment: change.environment, appID: change.appID,
                    userIdentifier: change.conflictUser ?? change.owner, conflictUser: change.conflictUser, receiptID: change.receiptID,
                    occurredAt: change.occurredAt, id: ids.next(at: now)))
        }
        for consent in changes.consents {
            events.append(
                NewEvent.consentRescinded(
                    notificationUUID: consent.notificationUUID, appTransactionID: consent.appTransactionID, appID: consent.appID,
                    environment: consent.environment, userIdentifier: consent.userIdentifier, occurredAt: consent.signedAt,
                    id: ids.next(at: now)))
        }
        return events
    }

    /// Writes the events with their per-subject sequence numbers, and a pending delivery for each
    /// endpoint of the app whose filter takes the event: one statement.
    static func insert(_ events: [NewEvent], on connection: PostgresConnection) throws {
        guard !events.isEmpty else { return }
        var columns = ColumnBatch([.uuid, .uuid, .text, .text, .text, .text, .text, .text, .uuid, .timestamptz, .text, .text, .text])
        for event in events {
            columns.append([
                .uuid(event.id), .uuid(event.appID), .text(event.type.rawValue), .text(event.environment), .text(event.userIdentifier),
                .text(event.subject), .text(event.originalTransactionID), .text(event.transactionID), .uuid(event.receiptID),
                .date(event.occurredAt), .text(event.data), .text(event.dedupeKey), .text(event.orderingKey),
            ])
        }
        _ = try connection.query(
            """
            WITH input AS (
                SELECT * FROM unnest(\(columns[0])::uuid[], \(columns[1])::uuid[], \(columns[2])::text[], \(columns[3])::text[],
                    \(columns[4])::text[], \(columns[5])::text[], \(columns[6])::text[], \(columns[7])::text[], \(columns[8])::uuid[],
                    \(columns[9])::timestamptz[], \(columns[10])::text[], \(columns[11])::text[], \(columns[12])::text[])
                  WITH ORDINALITY AS u(id, app_id, type, environment, user_identifier, subject, original_transaction_id,
                       transaction_id, receipt_id, occurred_at, data, dedupe_key, ordering_key, n)
            ), fresh AS (
                -- A keyed change is stated once: not if its subject already has the event (read
                -- under the subject's lock, like the sequence below), nor twice in one batch.
                SELECT i.* FROM (SELECT *, row_number() OVER (PARTITION BY dedupe_key ORDER BY n) AS copy FROM input) i
                WHERE i.dedupe_key IS NULL OR (i.copy = 1 AND NOT EXISTS (
                    SELECT 1 FROM events e
                    WHERE e.app_id = i.app_id AND e.subject = i.subject AND COALESCE(e.environment, '') = COALESCE(i.environment, '')
                      AND e.dedupe_key = i.dedupe_key))
            ), numbered AS (
                -- The subject's newest event, one probe of the unique index; every writer of a
                -- subject holds its lock from an earlier statement (the subscription's advisory
                -- lock, the receipt's or the purchase's row lock), so this statement's snapshot
                -- already sees the previous holder's events.
                SELECT f.*, COALESCE(
                           (SELECT e.sequence FROM events e
                            WHERE e.app_id = f.app_id AND e.subject = f.subject AND COALESCE(e.environment, '') = COALESCE(f.environment, '')
                            ORDER BY e.sequence DESC LIMIT 1), 0)
                       + row_number() OVER (PARTITION BY f.app_id, COALESCE(f.environment, ''), f.subject ORDER BY f.n) AS sequence
                FROM fresh f
            ), inserted AS (
                INSERT INTO events (id, app_id, type, environment, user_identifier, subject, original_transaction_id,
                    transaction_id, receipt_id, sequence, occurred_at, data, dedupe_key)
                SELECT id, app_id, type, environment, user_identifier, subject, original_transaction_id, transaction_id,
                    receipt_id, sequence, occurred_at, data, dedupe_key
                FROM numbered
                RETURNING id
            )
            -- `IN (inserted)`, not a join with it: both CTEs are estimated at one row, so a join
            -- was planned as a nested loop over them, n² for n events (half the statement's time
            -- at 120 events); the semi-join hashes it, and an app without endpoints stops at the
            -- index probe of webhook_endpoints. (The INSERT above runs whether or not it is read.)
            INSERT INTO webhook_deliveries (endpoint_id, event_id, app_id, ordering_key)
            SELECT w.id, n.id, n.app_id, n.ordering_key
            FROM numbered n JOIN webhook_endpoints w ON w.app_id = n.app_id
            WHERE n.id IN (SELECT id FROM inserted)
              AND (cardinality(w.event_types) = 0 OR EXISTS (
                SELECT 1 FROM unnest(w.event_types) AS t
                WHERE t = '*' OR t = n.type OR (right(t, 2) = '.*' AND starts_with(n.type, left(t, -1)))))
            ORDER BY n.n, w.id
            """)
    }
}
