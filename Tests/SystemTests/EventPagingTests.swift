import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import Synchronization
import Testing

/// The events API's order under concurrent writers: 100,000 events written by four connections
/// in transactions that commit out of order (one holds its transaction open while the others
/// commit), read by a reader paging with `after` at the same time: every event exactly once.
/// In the crash-recovery suite (one test at a time): writing 100,000 rows in seconds takes both
/// cores, which starved the timing-bound suites beside it (the Prometheus scrape's 1 s timeout).
extension CrashRecoveryTests {
    @Test("Events API: 100,000 events, four writers committing out of order, a reader paging meanwhile: no gap, no repeat")
    func pagesWithoutGapsOrRepeats() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let total = 100_000
        let writers = 4
        let perTransaction = 2_500
        let app = system.app.id
        let catalog = PostgresEventCatalog(pool: PostgresConnectionPool(configuration: system.configuration.postgres, size: 2))

        let failed = Atomic<Bool>(false)
        let writing = Task {
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in 0..<writers {
                        group.addTask {
                            let connection = try system.postgres()
                            defer { connection.close() }
                            for batch in stride(from: writer * perTransaction, to: total, by: writers * perTransaction) {
                                try connection.transaction { connection in
                                    _ = try connection.query(
                                        """
                                        INSERT INTO events (id, app_id, type, subject, sequence, occurred_at, data)
                                        SELECT gen_random_uuid(), \(app), 'receipt.validated', 'receipt:' || n, 1, now(),
                                               json_build_object('n', n)
                                        FROM generate_series(\(batch)::int, \(batch + perTransaction - 1)::int) AS n
                                        """)
                                    // Writer 0 holds its transaction open while the others commit after it began.
                                    if writer == 0 { usleep(300_000) }
                                }
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            } catch {
                failed.store(true, ordering: .releasing)
                throw error
            }
        }
        var seen: [Int] = []
        var after: UUID?
        let deadline = ContinuousClock.now + .seconds(240)
        // Until every event is read, or a writer failed (then its error is the test's).
        while ContinuousClock.now < deadline, !failed.load(ordering: .acquiring) {
            let page = try #require(try await catalog.events(appID: app, query: EventQuery(after: after, limit: 1000)))
            for event in page.events {
                let n = try JSONValue.parse(Array(event.data.utf8))["n"]?.intValue
                seen.append(try #require(n))
            }
            after = page.events.last?.id ?? after
            if seen.count >= total && !page.hasMore { break }
            if page.events.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
        }
        try await writing.value
        #expect(seen.count == total, "read \(seen.count) of \(total)")
        #expect(Set(seen).count == seen.count, "no event twice")
        #expect(Set(seen) == Set(0..<total), "no event missing")
    }
}
