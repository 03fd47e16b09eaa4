import Foundation
import Libpq
import ReceiptCore

// The same connection serves the worker's refund defence: a request's facts, and the answers sent.
extension PostgresReceiptStore: RefundDefenceLog {
    public func consumptionFacts(appID: UUID, environment: String?, transactionID: String, notificationID: String) throws -> ConsumptionFacts {
        let policy =
            try connection.query("SELECT consumption_policy AS policy FROM apps WHERE id = \(appID)").rows.first?.string("policy")
            .flatMap(ConsumptionPolicy.init(rawValue:)) ?? .off
        var facts = ConsumptionFacts(policy: policy)
        guard policy != .off else { return facts }
        // Answered: Apple took it (a claim alone is a send under way, or one that failed).
        facts.alreadyAnswered =
            !(try connection.query(
                """
                SELECT 1 AS found FROM consumption_answers
                WHERE app_id = \(appID) AND notification_id = \(notificationID) AND sent_at IS NOT NULL
                """
            ).rows.isEmpty)
        // The request's environment first; a purchase is unique per (environment, transaction id).
        let purchase = try connection.query(
            """
            SELECT user_identifier FROM in_app_purchases WHERE app_id = \(appID) AND transaction_id = \(transactionID)
            ORDER BY (environment = \(environment)) DESC NULLS LAST LIMIT 1
            """
        ).rows.first
        facts.purchaseKnown = purchase != nil
        guard let user = purchase?.string("user_identifier") else { return facts }
        facts.userIdentifier = user
        // The customer's spend in their main currency (revoked purchases were given back), and how
        // many of their other purchases were refunded or revoked.
        if let spend = try connection.query(
            """
            SELECT currency, sum(price_milli)::text AS total FROM in_app_purchases
            WHERE app_id = \(appID) AND user_identifier = \(user) AND cancellation_date IS NULL AND price_milli IS NOT NULL
            GROUP BY currency ORDER BY sum(price_milli) DESC LIMIT 1
            """
        ).rows.first {
            facts.currency = spend.string("currency")
            facts.lifetimeSpendMilli = spend.string("total").flatMap { Int64($0) } ?? 0
        }
        facts.refundedPurchases =
            try connection.query(
                """
                SELECT count(*) AS refunded FROM in_app_purchases
                WHERE app_id = \(appID) AND user_identifier = \(user) AND cancellation_date IS NOT NULL AND transaction_id <> \(transactionID)
                """
            ).rows.first?.int("refunded") ?? 0
        facts.customer = try CustomerConsumptionRows.read(appID: appID, userIdentifier: user, on: connection)
        return facts
    }

    public func claimConsumption(appID: UUID, notificationID: String, transactionID: String, job: UUID) throws -> Bool {
        // One statement: the insert takes a free request; an existing row answers who holds it.
        let holder = try connection.query(
            """
            WITH claimed AS (
                INSERT INTO consumption_answers (app_id, notification_id, transaction_id, claimed_by)
                VALUES (\(appID), \(notificationID), \(transactionID), \(job))
                ON CONFLICT (app_id, notification_id) DO NOTHING
                RETURNING claimed_by
            )
            SELECT claimed_by FROM claimed
            UNION ALL
            SELECT claimed_by FROM consumption_answers WHERE app_id = \(appID) AND notification_id = \(notificationID)
            LIMIT 1
            """
        ).rows.first?.uuid("claimed_by")
        return holder == job
    }

    public func record(_ answers: [ConsumptionAnswer]) throws {
        guard !answers.isEmpty else { return }
        try connection.transaction { connection in
            var ids = MonotonicEventIDs()
            var events: [NewEvent] = []
            for answer in answers {
                // Once per request: a replayed job's answer changes nothing, states nothing, audits nothing.
                let inserted = try connection.query(
                    """
                    INSERT INTO consumption_answers (app_id, notification_id, transaction_id, claimed_by, environment, user_identifier,
                        policy, answer, sent_at)
                    VALUES (\(answer.appID), \(answer.notificationID), \(answer.transactionID), \(answer.jobID), \(answer.environment),
                            \(answer.userIdentifier), \(answer.policy.rawValue), \(answer.json.encodedText)::jsonb, \(answer.sentAt))
                    ON CONFLICT (app_id, notification_id) DO UPDATE SET
                        environment = excluded.environment, user_identifier = excluded.user_identifier, policy = excluded.policy,
                        answer = excluded.answer, sent_at = excluded.sent_at
                    WHERE consumption_answers.sent_at IS NULL
                    RETURNING notification_id
                    """
                ).rows
                guard !inserted.isEmpty else { continue }
                events.append(answer.event(id: ids.next(at: answer.sentAt)))
                try AuditRows.begin(
                    AuditAction(
                        actor: "receiptq", role: nil, action: "refund.consumption_sent", source: "worker",
                        target: "transaction \(answer.transactionID): \(answer.body.json.encodedText)", appID: answer.appID,
                        userIdentifiers: answer.userIdentifier.map { [$0] } ?? []),
                    outcome: "done", on: connection)
            }
            try EventRows.insert(events, on: connection)
        }
    }
}

/// What apps post about their users for the refund defence (`customer_consumption`).
enum CustomerConsumptionRows {
    static func read(appID: UUID, userIdentifier: String, on connection: PostgresConnection) throws -> CustomerConsumption? {
        guard
            let row = try connection.query(
                """
                SELECT consented, delivery_status, consumption_percentage, sample_content_provided, play_time_seconds::text AS play_time
                FROM customer_consumption WHERE app_id = \(appID) AND user_identifier = \(userIdentifier)
                """
            ).rows.first
        else { return nil }
        return CustomerConsumption(
            consented: row.bool("consented") ?? false, deliveryStatus: row.string("delivery_status").flatMap(ConsumptionDeliveryStatus.init),
            consumptionPercentage: row.int("consumption_percentage"), sampleContentProvided: row.bool("sample_content_provided") ?? false,
            playTimeSeconds: row.string("play_time").flatMap { Int64($0) })
    }

    /// Replaces what the app said about the user.
    static func write(_ statement: CustomerConsumption, appID: UUID, userIdentifier: String, on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            INSERT INTO customer_consumption
                (app_id, user_identifier, consented, delivery_status, consumption_percentage, sample_content_provided, play_time_seconds, updated_at)
            VALUES (\(appID), \(userIdentifier), \(statement.consented), \(statement.deliveryStatus?.rawValue),
                    \(statement.consumptionPercentage), \(statement.sampleContentProvided), \(statement.playTimeSeconds), now())
            ON CONFLICT (app_id, user_identifier) DO UPDATE SET
                consented = excluded.consented, delivery_status = excluded.delivery_status,
                consumption_percentage = excluded.consumption_percentage, sample_content_provided = excluded.sample_content_provided,
                play_time_seconds = excluded.play_time_seconds, updated_at = now()
            """)
    }
}
