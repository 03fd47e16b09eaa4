import Conformance
import DevTools
import Foundation
import Hiredis
import Libpq
import Logging
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

@Suite("The entitlement conformance run", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct ConformanceRunTests {
    /// Plays `customers` customers for `days` days under `faults` and returns the report.
    static func run(customers: Int, days: Int, faults: Faults, seed: UInt64) async throws -> ConformanceReport {
        // The deployment `receiptq conformance` runs, on the tests' servers.
        try await ConformanceRun(customers: customers, days: days, faults: faults, seed: seed)
            .play(environment: TestSystem.serverEnvironment, logger: ConformanceCommandTests.quiet).report
    }

    /// What CI asserts of a run: no wrong answer once the system heard from Apple, no event
    /// missing or duplicated (out of order and unexpected ones are counted in the table).
    static func expectConformant(_ report: ConformanceReport, customers: Int) {
        let total = report.total
        let shown = report.disagreements.filter {
            if case .lateAnswer = $0.kind { return false }
            return true
        }.prefix(5).map(\.description).joined(separator: "\n\n")
        #expect(total.customers == customers)
        #expect(total.answersChecked >= customers)
        #expect(total.wrong == 0, "\(report.table)\n\(shown)")
        #expect(total.eventsMissing == 0 && total.eventsDuplicated == 0, "\(report.table)\n\(shown)")
    }

    @Test("A short simulated run of every scenario without faults: every answer right, every event once")
    func withoutFaults() async throws {
        let report = try await Self.run(customers: 18, days: 60, faults: Faults(.none), seed: 45)
        Self.expectConformant(report, customers: 18)
        #expect(report.total.eventsOutOfOrder == 0, "\(report.table)")
        print(report.table)
    }

    /// Under duplicated, delayed and reordered notifications. (It once found a grace period read
    /// as active and a voluntary expiry's event missing: the mock App Store called a period active
    /// a fraction of a millisecond past its end; `MockBoundaryTests`.)
    @Test("The CI run: every scenario under duplicated, delayed and reordered notifications")
    func withDefaultFaults() async throws {
        let report = try await Self.run(customers: 36, days: 90, faults: Faults(.default), seed: 4_545)
        Self.expectConformant(report, customers: 36)
        print(report.table)
    }
}
