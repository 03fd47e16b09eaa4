import Foundation
import Logging
import ReceiptCore
import ReceiptScheduler
import ReceiptTesting
import Synchronization
import SystemTesting
import Testing

/// The history sweep counts its interval on the clock it is given: a conformance run's simulated
/// clock jumps hours at a time, and a lost notification must be recovered within simulated hours,
/// not after 15 minutes of the machine's time.
@Suite("The notification history sweep's cadence")
struct NotificationSweepCadenceTests {
    /// No app to sweep: each sweep is one `sweptApps()` call, counted.
    final class CountingCursors: NotificationHistoryCursors {
        private let count = Mutex(0)
        var sweeps: Int { count.withLock { $0 } }
        func sweptApps() async throws -> [AppRecord] {
            count.withLock { $0 += 1 }
            return []
        }
        func cursor(appID: UUID, environment: AppStoreEnvironment) async throws -> NotificationHistoryCursor? { nil }
        func save(_ cursor: NotificationHistoryCursor, appID: UUID, environment: AppStoreEnvironment) async throws {}
        func silentApps(since: Date) async throws -> Int { 0 }
    }

    struct NoHistory: NotificationHistorySource {
        func page(
            app: AppRecord, environment: AppStoreEnvironment, start: Date, end: Date, paginationToken: String?
        ) async throws
            -> NotificationHistoryPage
        { NotificationHistoryPage(signedPayloads: [], paginationToken: nil, hasMore: false) }
    }

    @Test("An hour's interval on a clock that jumps an hour: the next sweep within a tick of the machine's time; none before")
    func followsTheInjectedClock() async throws {
        let clock = MockClock()
        let cursors = CountingCursors()
        let sweep = NotificationHistorySweep(
            configuration: .init(interval: .seconds(3_600), tick: .milliseconds(20)), source: NoHistory(), cursors: cursors,
            accept: { _, _ in .accepted }, now: clock.closure, logger: Logger(label: "cadence"))
        let task = Task { try await sweep.run() }
        defer { task.cancel() }
        #expect(try await eventually { cursors.sweeps == 1 }, "it sweeps on start")
        // Not yet due on the injected clock: many ticks pass without a sweep.
        clock.advance(by: 3_599)
        #expect(try await !eventually(timeout: .milliseconds(300)) { cursors.sweeps > 1 })
        clock.advance(by: 1)
        #expect(try await eventually { cursors.sweeps == 2 }, "due once the clock passed the interval")
        clock.advance(by: 7 * 3_600)
        #expect(try await eventually { cursors.sweeps == 3 }, "a jump of many intervals is one sweep")
        #expect(try await !eventually(timeout: .milliseconds(300)) { cursors.sweeps > 3 })
    }
}
