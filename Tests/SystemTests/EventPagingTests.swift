import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import Synchronization
import SystemTesting
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
        let othersDone = WritersDone()
        let writing = Task {
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in 0..<writers {
                        group.addTask {
                            let connection = try system.postgres()
                            // Writer 0 watches the others' commits on a connection of its own.
                            let observer = writer == 0 ? try system.postgres() : nil
                            defer {
                                connection.close()
                                observer?.close()
                            }
                            func committed(_ observer: PostgresConnection) throws -> Int {
                                try observer.query("SELECT count(*) AS n FROM events WHERE app_id = \(app)").rows.first?.int("n") ?? -1
                            }
                            for batch in stride(from: writer * perTransaction, to: total, by: writers * perTransaction) {
                                try connection.transaction { connection in
                                    _ = try connection.query(
                                        """
                                        INSERT INTO events (id, app_id, type, subject, sequence, occurred_at, data)
                                        SELECT gen_random_uuid(), \(app), 'receipt.validated', 'receipt:' || n, 1, now(),
                                               json_build_object('n', n)
                                        FROM generate_series(\(batch)::int, \(batch + perTransaction - 1)::int) AS n
                                        """)
                                    // Writer 0 holds its transaction open until another writer committed
                                    // after it began (or none is left to). Inside a synchronous
                                    // transaction, so the blocking poll.
                                    if let observer {
                                        let before = try committed(observer)
                                        _ = try eventuallyBlocking(timeout: .seconds(30), interval: .milliseconds(10)) {
                                            try committed(observer) > before || othersDone.count.load(ordering: .acquiring) == writers - 1
                                        }
                                    }
                                }
                            }
                            if writer != 0 { othersDone.count.add(1, ordering: .releasing) }
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
        // Until every event is read, or a writer failed (then its error is the test's): page after
        // page while there are events, polled again after an empty one.
        _ = try await eventually(timeout: .seconds(240), interval: .milliseconds(20)) {
            while !failed.load(ordering: .acquiring) {
                let page = try #require(try await catalog.events(appID: app, query: EventQuery(after: after, limit: 1000)))
                for event in page.events {
                    let n = try JSONValue.parse(Array(event.data.utf8))["n"]?.intValue
                    seen.append(try #require(n))
                }
                after = page.events.last?.id ?? after
                if seen.count >= total && !page.hasMore { return true }
                if page.events.isEmpty { return false }
            }
            return true
        }
        try await writing.value
        #expect(seen.count == total, "read \(seen.count) of \(total)")
        #expect(Set(seen).count == seen.count, "no event twice")
        #expect(Set(seen) == Set(0..<total), "no event missing")
    }
}

/// How many writers finished, shared by the writer tasks.
private final class WritersDone: Sendable {
    let count = Atomic<Int>(0)
}
