import Foundation
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

@testable import PostgresStore

/// The export and the erasure read one list, ``CustomerDataSections``; this holds the list to the
/// schema, so that a table added with a user's id and left out of it fails here, before a customer
/// is exported without it or erased but for it.
@Suite("Customer data sections cover the schema", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct CustomerDataSectionsTests {
    /// Columns that name a customer. `granted_by`, `actor` and the like name operators.
    static let userColumns = ["user_identifier", "user_identifiers", "alias", "conflict_user_identifier"]

    @Test("Every table with a user's id is a section, and every section is erased by a statement or through one")
    func sectionsCoverEveryCustomerTable() throws {
        let (_, connection, _) = try TestSystem.newApp(named: "sections", bundleID: "com.example.sections")
        defer { connection.close() }
        let columns = PostgresArray.literal(Self.userColumns.map { Optional($0) })
        let tables = Set(
            try connection.query(
                """
                SELECT DISTINCT c.table_name AS t FROM information_schema.columns c
                JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
                WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' AND c.column_name = ANY(\(columns)::text[])
                  -- A partition is its parent's (audit_log's weeks): the statements on the parent reach it.
                  AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
                                  WHERE k.relname = c.table_name AND k.relnamespace = current_schema()::regnamespace)
                """
            ).rows.compactMap { $0.string("t") })
        #expect(tables.contains("receipts") && tables.contains("user_aliases"), "the query finds the customer tables: \(tables)")
        let sections = CustomerDataSections.all
        let covered = Set(sections.map(\.table))
        #expect(
            tables.subtracting(covered).isEmpty, "tables holding a user's id that neither export nor erasure reads: \(tables.subtracting(covered))")
        let erasedByStatement = Set(sections.compactMap { if case .statement = $0.erasure { $0.name } else { nil } })
        for section in sections {
            if case .through(let other) = section.erasure {
                #expect(erasedByStatement.contains(other), "\(section.name) is erased through \(other), which has no statement")
            }
        }
        // A table with a user's id is erased by a statement of its own, not merely through another.
        for section in sections where tables.contains(section.table) {
            #expect(erasedByStatement.contains(section.name), "\(section.name) holds user ids but has no erasure statement")
        }
    }
}
