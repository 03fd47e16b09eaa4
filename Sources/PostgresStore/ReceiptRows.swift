import Foundation
import Libpq
import ReceiptCore

/// Reads receipt resources back from Postgres; shared by the worker's store and the API's catalog.
enum ReceiptRows {
    /// One receipt, only if it belongs to `appID` (any app when nil).
    static func resource(_ connection: PostgresConnection, id: UUID, appID: UUID?) throws -> ReceiptResource? {
        guard let resource = try resources(connection, ids: [id])[id] else { return nil }
        return appID == nil || resource.appFamilyID == appID ? resource : nil
    }

    /// Several receipts in two statements (receipts, then their purchases), keyed by id; missing ids are absent.
    static func resources(_ connection: PostgresConnection, ids: [UUID]) throws -> [UUID: ReceiptResource] {
        guard !ids.isEmpty else { return [:] }
        // Always by primary key: a combined "($2 IS NULL OR app_id = $2)" let the planner pick the
        // (app_id, created_at) index and scan an app's whole history to return one row.
        let rows = try connection.query(
            """
            SELECT id, app_id, style, bundle_id, environment, status, apple_status, is_fraud, fraud_reason,
                   user_identifier, identifier_for_vendor, country_code, ip_address, metadata::text AS metadata,
                   array_to_json(transaction_ids)::text AS transaction_ids, created_at, updated_at, source, transaction_id,
                   validated_by, error_code
            FROM receipts WHERE id = ANY(\(PostgresBinaryArray(uuids: ids))::uuid[])
            """
        ).rows
        var receipts: [(row: PostgresRow, id: UUID, app: UUID, environment: String?, transactionIDs: [String])] = []
        for row in rows {
            guard let id = row.uuid("id"), let app = row.uuid("app_id") else { continue }
            // The one-pass parser, as for every other JSON the worker reads: not a JSONDecoder per row.
            let transactionIDs: [String] =
                row.string("transaction_ids").flatMap { JSONValue.parseLeniently($0.utf8)?.arrayValue }?
                .compactMap { element -> String? in if case .string(let id) = element { id } else { nil } } ?? []
            receipts.append((row, id, app, row.string("environment"), transactionIDs))
        }
        let keys = receipts.flatMap { receipt in receipt.transactionIDs.map { PurchaseKey(environment: receipt.environment ?? "", transactionID: $0) }
        }
        let purchases = try purchaseRows(connection, keys: keys)

        var result: [UUID: ReceiptResource] = [:]
        for receipt in receipts {
            let row = receipt.row
            let submission = Submission(
                userIdentifier: row.string("user_identifier"), identifierForVendor: row.string("identifier_for_vendor"),
                countryCode: row.string("country_code"), ipAddress: row.string("ip_address"),
                metadata: row.string("metadata").flatMap { JSONValue.parseLeniently($0.utf8) })
            let owned = receipt.transactionIDs.compactMap { purchases[PurchaseKey(environment: receipt.environment ?? "", transactionID: $0)] }
                .sorted { lhs, rhs in
                    switch (lhs.purchase.purchaseDate, rhs.purchase.purchaseDate) {
                    case (let l?, let r?) where l != r: l < r
                    case (.some, nil): true
                    case (nil, .some): false
                    default: lhs.purchase.transactionID < rhs.purchase.transactionID
                    }
                }
                .map { entry in
                    let user = submission.userIdentifier
                    return InAppPurchaseResource(entry.purchase, isConflict: entry.owner != nil && user != nil && entry.owner != user)
                }
            let status = row.string("status").flatMap(ValidationStatus.init(rawValue:)) ?? .pending
            result[receipt.id] = ReceiptResource(
                id: receipt.id, style: row.string("style").flatMap(ReceiptStyle.init(rawValue:)), appFamilyID: receipt.app,
                bundleID: row.string("bundle_id"), isFraud: row.bool("is_fraud") ?? false, fraudReason: row.string("fraud_reason"),
                environment: receipt.environment, submission: submission,
                validationStatus: status, appleStatus: row.int("apple_status"), inAppPurchases: owned,
                createdAt: row.date("created_at") ?? Date(), updatedAt: row.date("updated_at") ?? Date(),
                source: row.string("source").flatMap(JobSource.init(rawValue:)), transactionID: row.string("transaction_id"),
                validatedBy: row.string("validated_by").flatMap(ValidationBackend.init(rawValue:)),
                // A dead letter's reason; an invalid receipt has Apple's status, a fraud its reason.
                errorCode: status == .failed ? row.string("error_code").map(FailureCode.init(rawValue:)) : nil)
        }
        return result
    }

    struct PurchaseKey: Hashable {
        var environment: String
        var transactionID: String
    }

    /// The ledger rows of `keys`, each with the user who first claimed it.
    private static func purchaseRows(
        _ connection: PostgresConnection, keys: [PurchaseKey]
    ) throws -> [PurchaseKey: (purchase: InAppPurchase, owner: String?)] {
        guard !keys.isEmpty else { return [:] }
        let rows = try connection.query(
            """
            SELECT \(unescaped: PurchaseRows.columns("p")), p.user_identifier
            FROM in_app_purchases p
            JOIN unnest(\(PostgresBinaryArray(texts: keys.map(\.environment)))::text[],
                        \(PostgresBinaryArray(texts: keys.map(\.transactionID)))::text[]) AS k(environment, transaction_id)
              ON p.environment = k.environment AND p.transaction_id = k.transaction_id
            """
        ).rows
        var result: [PurchaseKey: (purchase: InAppPurchase, owner: String?)] = [:]
        for row in rows {
            let purchase = PurchaseRows.purchase(row)
            result[PurchaseKey(environment: row.string("environment") ?? "", transactionID: purchase.transactionID)] =
                (purchase, row.string("user_identifier"))
        }
        return result
    }
}

/// Postgres array literals for `unnest` and `ANY` in the statements that still bind arrays as text
/// (short lists: an app's users, a page's ids); a batch's columns go as ``PostgresBinaryArray``.
enum PostgresArray {
    /// `{"a","b",NULL}`: every element quoted and escaped, so any string round-trips; nil is SQL NULL.
    ///
    /// Built as bytes: when batch columns went this way they held whole receipts (kilobytes each),
    /// and appending them to a `String` one scalar at a time cost more than the rest of a commit.
    static func literal(_ values: [String?]) -> String {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(values.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            guard var value else {
                bytes.append(contentsOf: "NULL".utf8)
                continue
            }
            bytes.append(UInt8(ascii: "\""))
            value.withUTF8 { utf8 in
                // Runs between the bytes to escape go in whole (a memcpy each): most values (ids,
                // dates, base64) have none, and a byte-at-a-time append was 4 % of the worker's CPU.
                var start = 0
                for index in utf8.indices where utf8[index] == UInt8(ascii: "\\") || utf8[index] == UInt8(ascii: "\"") {
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                    bytes.append(UInt8(ascii: "\\"))
                    start = index
                }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
            }
            bytes.append(UInt8(ascii: "\""))
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Convenience for non-optional columns.
    static func literal(_ values: [String]) -> String { literal(values.map(Optional.some)) }
}
