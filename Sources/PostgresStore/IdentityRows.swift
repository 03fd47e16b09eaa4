import Foundation
import Libpq
import ReceiptCore

/// Who a purchase belongs to: app account tokens mapped to users, and user ids merged into one
/// customer (`user_aliases`, alias → canonical id, one hop). The worker's store resolves each
/// batch's users here before writing; the client API's identity doors change the mappings here.
enum IdentityRows {
    /// The batch with each record's user resolved: a record without a user takes the one its
    /// purchases' app account token is mapped to (a purchase only a notification or an import
    /// brought), and any user that is an alias becomes its customer's canonical id. A submission
    /// that carries an app account token registers it for its user first (the first mapping stands).
    /// One statement for the look-ups, whatever the batch.
    static func resolve(_ records: [ValidationRecord], on connection: PostgresConnection) throws -> [ValidationRecord] {
        var records = records
        for record in records where !record.isRepoll && !record.isNotification {
            guard let token = record.envelope.payload.purchase?.submission.appAccountToken, let user = record.userIdentifier else { continue }
            do {
                _ = try register(appAccountToken: token, userIdentifier: user, appID: record.envelope.appID, on: connection)
            } catch CustomerIdentityError.tokenTaken {
                // Issued for another user first: that mapping stands, and this purchase is this user's.
            }
        }
        var keys = ColumnBatch([.uuid, .text, .uuid])
        var indices: [Int] = []
        for (index, record) in records.enumerated() {
            let token = record.userIdentifier == nil ? record.purchases.lazy.compactMap(\.appAccountToken).first : nil
            guard record.userIdentifier != nil || token != nil else { continue }
            keys.append([.uuid(record.envelope.appID), .text(record.userIdentifier), .uuid(token)])
            indices.append(index)
        }
        guard !indices.isEmpty else { return records }
        let rows = try connection.query(
            """
            SELECT k.i, COALESCE(a.user_identifier, k.user_identifier, t.user_identifier) AS user_identifier
            FROM unnest(\(keys[0])::uuid[], \(keys[1])::text[], \(keys[2])::uuid[]) WITH ORDINALITY AS k(app_id, user_identifier, token, i)
            LEFT JOIN app_account_tokens t
                   ON k.user_identifier IS NULL AND t.app_id = k.app_id AND t.app_account_token = k.token
            LEFT JOIN user_aliases a ON a.app_id = k.app_id AND a.alias = COALESCE(k.user_identifier, t.user_identifier)
            """
        ).rows
        for row in rows {
            guard let ordinal = row.int("i"), (1...indices.count).contains(ordinal), let user = row.string("user_identifier") else { continue }
            records[indices[ordinal - 1]].userIdentifier = user
        }
        return records
    }

    /// Every id of the customer `user` belongs to, in any of `apps` (an array literal): `user`
    /// first, then its canonical id when it is an alias, and the canonical's aliases, sorted.
    static func customerIDs(of user: String, apps: String, on connection: PostgresConnection) throws -> [String] {
        let merged = try connection.query(
            """
            WITH canonical AS (
                SELECT user_identifier AS id FROM user_aliases WHERE app_id = ANY(\(apps)::uuid[]) AND alias = \(user)
            )
            SELECT id FROM canonical
            UNION
            SELECT a.alias FROM user_aliases a
            WHERE a.app_id = ANY(\(apps)::uuid[])
              AND a.user_identifier = ANY(ARRAY(SELECT id FROM canonical) || \(user)::text)
            """
        ).rows.compactMap { $0.string("id") }
        return [user] + merged.filter { $0 != user }.sorted()
    }

    /// The customer `user` belongs to: its canonical id when it is an alias, else itself.
    static func canonical(appID: UUID, userIdentifier user: String, on connection: PostgresConnection) throws -> String {
        try connection.query("SELECT user_identifier FROM user_aliases WHERE app_id = \(appID) AND alias = \(user)").rows.first?
            .string("user_identifier") ?? user
    }

    /// Maps the token to the user's customer and attaches, in the caller's transaction, the stored
    /// purchases without a user that carry it (and their subscriptions without one).
    /// - Throws: ``CustomerIdentityError/tokenTaken`` when the token maps to another customer.
    static func register(
        appAccountToken token: UUID, userIdentifier user: String, appID: UUID, on connection: PostgresConnection
    ) throws -> TokenRegistration {
        let customer = try canonical(appID: appID, userIdentifier: user, on: connection)
        // The existing row is visible to the outer SELECT when the insert did nothing.
        let mapped = try connection.query(
            """
            WITH inserted AS (
                INSERT INTO app_account_tokens (app_id, app_account_token, user_identifier) VALUES (\(appID), \(token), \(customer))
                ON CONFLICT (app_id, app_account_token) DO NOTHING
                RETURNING user_identifier
            )
            SELECT COALESCE((SELECT user_identifier FROM inserted),
                (SELECT user_identifier FROM app_account_tokens WHERE app_id = \(appID) AND app_account_token = \(token))) AS user_identifier
            """
        ).rows.first?.string("user_identifier")
        guard mapped == customer else { throw CustomerIdentityError.tokenTaken }
        let attached =
            try connection.query(
                """
                WITH attached AS (
                    UPDATE in_app_purchases SET user_identifier = \(customer), updated_at = now()
                    WHERE app_id = \(appID) AND app_account_token = \(token) AND user_identifier IS NULL
                    RETURNING environment, original_transaction_id
                ), subscribed AS (
                    UPDATE subscriptions s SET user_identifier = \(customer), updated_at = now()
                    FROM (SELECT DISTINCT environment, original_transaction_id FROM attached) a
                    WHERE s.app_id = \(appID) AND s.environment = a.environment AND s.original_transaction_id = a.original_transaction_id
                      AND s.user_identifier IS NULL
                )
                SELECT count(*) AS attached FROM attached
                """
            ).rows.first?.int("attached") ?? 0
        return TokenRegistration(appAccountToken: token, userIdentifier: customer, attachedPurchases: attached)
    }

    /// Merges the alias's customer into the user's, in the caller's transaction: the alias's own
    /// aliases follow it (no chain), its purchases, subscriptions, shares, tokens and grants move,
    /// conflicts between the two ids are lifted, and a `customer.aliased` event is written.
    /// - Throws: ``CustomerIdentityError/aliasCycle`` when the alias is the customer's own id.
    static func alias(
        _ alias: String, userIdentifier user: String, appID: UUID, at: Date, on connection: PostgresConnection
    ) throws -> AliasMerge {
        // One merge of an app at a time: two crossing merges could otherwise each see no cycle.
        _ = try connection.query("SELECT pg_advisory_xact_lock(hashtextextended('user_aliases|' || \(appID.canonical), 0))")
        let customer = try canonical(appID: appID, userIdentifier: user, on: connection)
        guard alias != customer else { throw CustomerIdentityError.aliasCycle }
        let source = try canonical(appID: appID, userIdentifier: alias, on: connection)
        guard source != customer else { return AliasMerge(alias: alias, userIdentifier: customer, movedPurchases: 0, created: false) }
        let moved =
            try connection.query(
                """
                WITH repointed AS (
                    UPDATE user_aliases SET user_identifier = \(customer) WHERE app_id = \(appID) AND user_identifier = \(source)
                ), added AS (
                    INSERT INTO user_aliases (app_id, alias, user_identifier) VALUES (\(appID), \(source), \(customer))
                ), tokens AS (
                    UPDATE app_account_tokens SET user_identifier = \(customer) WHERE app_id = \(appID) AND user_identifier = \(source)
                ), grants AS (
                    UPDATE entitlement_grants SET user_identifier = \(customer) WHERE app_id = \(appID) AND user_identifier = \(source)
                ), subscribed AS (
                    UPDATE subscriptions SET user_identifier = \(customer), updated_at = now()
                    WHERE app_id = \(appID) AND user_identifier = \(source)
                ), moved AS (
                    UPDATE in_app_purchases SET user_identifier = \(customer), updated_at = now()
                    WHERE app_id = \(appID) AND user_identifier = \(source)
                    RETURNING 1
                )
                SELECT count(*) AS moved FROM moved
                """
            ).rows.first?.int("moved") ?? 0
        // After the moves (a statement of its own sees them): the ids of one customer no longer
        // conflict or share with one another.
        _ = try connection.query(
            """
            WITH ids AS (
                SELECT \(customer)::text AS id UNION ALL SELECT alias FROM user_aliases WHERE app_id = \(appID) AND user_identifier = \(customer)
            ), lifted AS (
                UPDATE in_app_purchases SET is_conflict = false, conflict_user_identifier = NULL, updated_at = now()
                WHERE app_id = \(appID) AND user_identifier = \(customer) AND conflict_user_identifier IN (SELECT id FROM ids)
            ), copied AS (
                INSERT INTO purchase_shares (app_id, environment, transaction_id, user_identifier)
                SELECT app_id, environment, transaction_id, \(customer) FROM purchase_shares WHERE app_id = \(appID) AND user_identifier = \(source)
                ON CONFLICT DO NOTHING
            )
            DELETE FROM purchase_shares WHERE app_id = \(appID) AND user_identifier = \(source)
            """)
        var ids = MonotonicEventIDs()
        try EventRows.insert(
            [NewEvent.aliased(alias: alias, userIdentifier: customer, movedPurchases: moved, appID: appID, occurredAt: at, id: ids.next(at: at))],
            on: connection)
        return AliasMerge(alias: alias, userIdentifier: customer, movedPurchases: moved, created: true)
    }

    /// Moves the subscriptions of transferred transactions to their new owner.
    static func moveSubscriptions(_ transfers: [EventRows.PurchaseChange], on connection: PostgresConnection) throws {
        let moving = transfers.filter { $0.purchase.expiresDate != nil && $0.owner != nil }
        guard !moving.isEmpty else { return }
        var keys = ColumnBatch([.uuid, .text, .text, .text])
        for change in moving {
            keys.append([.uuid(change.appID), .text(change.environment), .text(change.purchase.originalTransactionID), .text(change.owner)])
        }
        _ = try connection.query(
            """
            UPDATE subscriptions s SET user_identifier = u.user_identifier, updated_at = now()
            FROM (SELECT DISTINCT * FROM unnest(\(keys[0])::uuid[], \(keys[1])::text[], \(keys[2])::text[], \(keys[3])::text[])
                  AS k(app_id, environment, original_transaction_id, user_identifier)) u
            WHERE s.app_id = u.app_id AND s.environment = u.environment AND s.original_transaction_id = u.original_transaction_id
              AND s.user_identifier IS DISTINCT FROM u.user_identifier
            """)
    }
}
