import Foundation
import Libpq
import PostgresStore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The retention step's Postgres session: what it sets before its batches.
@Suite("Retention's session", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct ExpiredRowsSessionTests {
    @Test("Its statements are never JIT-compiled: a batch's estimates on a large table would compile each one for longer than it runs")
    func noJIT() throws {
        let db = try PostgresConnection(configuration: try TestSystem.migratedDatabase().postgres)
        defer { db.close() }
        // On, as a server's default is: the step must turn it off itself.
        try db.execute("SET jit = on")
        let rows = PostgresExpiredRows(connection: db, apps: [UUID()])
        var jit: String?
        // Another test's sweep may hold the deployment's retention lock for a moment.
        let ran = try eventuallyBlocking {
            try rows.exclusively { jit = try db.query("SHOW jit").rows.first?["jit"] }
        }
        #expect(ran, "the retention lock was never free")
        #expect(jit == "off")
    }
}
