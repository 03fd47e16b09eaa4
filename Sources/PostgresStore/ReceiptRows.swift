import Foundation
import Libpq
import ReceiptCore

/// Reads the receipt resource back from Postgres; shared by the worker's store and the API's catalog.
enum ReceiptRows {
    static func resource(_ connection: PostgresConnection, id: UUID, appID: UUID?) throws -> ReceiptResource? {
        // Always by primary key: a combined "($2 IS NULL OR app_id = $2)" let the planner pick the
        // (app_id, created_at) index and scan an app's whole history to return one row.
        let rows = try connection.query(
            """
            SELECT id, app_id, style, bundle_id, environment, status, apple_status, is_fraud, fraud_reason,
                   user_identifier, identifier_for_vendor, country_code, ip_address, metadata::text AS metadata,
                   array_to_json(transaction_ids)::text AS transaction_ids, created_at, updated_at
            FROM receipts WHERE id = \(id)
            """
        ).rows.filter { appID == nil || $0.uuid("app_id") == appID }
        guard let row = rows.first, let appFamilyID = row.uuid("app_id") else { return nil }
        let submission = Submission(
            userIdentifier: row.string("user_identifier"), identifierForVendor: row.string("identifier_for_vendor"),
            countryCode: row.string("country_code"), ipAddress: row.string("ip_address"),
            metadata: row.string("metadata").flatMap { try? JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) })
        let environment = row.string("environment")
        let transactionIDs =
            row.string("transaction_ids").flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) } ?? []
        let purchases = try purchasesResource(
            connection, environment: environment ?? "", transactionIDs: transactionIDs, user: submission.userIdentifier)
        return ReceiptResource(
            id: id, style: row.string("style").flatMap(ReceiptStyle.init(rawValue:)), appFamilyID: appFamilyID,
            bundleID: row.string("bundle_id"), isFraud: row.bool("is_fraud") ?? false, fraudReason: row.string("fraud_reason"),
            environment: environment, submission: submission,
            validationStatus: row.string("status").flatMap(ValidationStatus.init(rawValue:)) ?? .pending,
            appleStatus: row.int("apple_status"), inAppPurchases: purchases,
            createdAt: row.date("created_at") ?? Date(), updatedAt: row.date("updated_at") ?? Date())
    }

    private static func purchasesResource(
        _ connection: PostgresConnection, environment: String, transactionIDs: [String], user: String?
    ) throws -> [InAppPurchaseResource] {
        guard !transactionIDs.isEmpty else { return [] }
        let rows = try connection.query(
            """
            SELECT transaction_id, original_transaction_id, product_id, quantity, purchase_date, original_purchase_date,
                   expires_date, cancellation_date, web_order_line_item_id, is_trial_period, is_in_intro_offer_period,
                   user_identifier
            FROM in_app_purchases
            WHERE environment = \(environment) AND transaction_id = ANY(\(textArray(transactionIDs))::text[])
            ORDER BY purchase_date NULLS LAST, transaction_id
            """
        ).rows
        return rows.map { row in
            let purchase = InAppPurchase(
                quantity: row.int("quantity") ?? 1, productID: row.string("product_id") ?? "",
                transactionID: row.string("transaction_id") ?? "",
                originalTransactionID: row.string("original_transaction_id") ?? "",
                purchaseDate: row.date("purchase_date"), originalPurchaseDate: row.date("original_purchase_date"),
                expiresDate: row.date("expires_date"), cancellationDate: row.date("cancellation_date"),
                webOrderLineItemID: row.string("web_order_line_item_id"), isTrialPeriod: row.bool("is_trial_period") ?? false,
                isInIntroOfferPeriod: row.bool("is_in_intro_offer_period") ?? false)
            let owner = row.string("user_identifier")
            return InAppPurchaseResource(purchase, isConflict: owner != nil && user != nil && owner != user)
        }
    }

    /// A Postgres text[] literal; every element quoted and escaped, so any string round-trips.
    static func textArray(_ values: [String]) -> String {
        "{"
            + values.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            .joined(separator: ",") + "}"
    }
}
