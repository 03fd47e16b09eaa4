import Conformance
import Foundation
import ReceiptCore
import Testing

@Suite("The conformance suite's checks and table")
struct ConformanceCheckTests {
    static let at = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("an answer agrees when it names the same entitlements until the same instants, within seconds")
    func answers() throws {
        let json = try JSONValue.parse(
            Array(
                #"{"entitlements":[{"id":"pro","expires_date":{"utc":"2027-01-15 08:00:00 UTC","ms":1800000000000},"is_active":true},{"id":"no_ads","is_active":true}]}"#
                    .utf8))
        let answered = ConformanceCheck.entitlements(fromCustomer: json)
        let until = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(answered == [HeldEntitlement(id: "no_ads", until: nil), HeldEntitlement(id: "pro", until: until)])
        #expect(
            ConformanceCheck.agrees([HeldEntitlement(id: "pro", until: until.addingTimeInterval(0.4)), .init(id: "no_ads", until: nil)], answered))
        #expect(
            !ConformanceCheck.agrees([HeldEntitlement(id: "pro", until: until.addingTimeInterval(30)), .init(id: "no_ads", until: nil)], answered))
        #expect(!ConformanceCheck.agrees([HeldEntitlement(id: "pro", until: until)], answered))
        #expect(!ConformanceCheck.agrees([HeldEntitlement(id: "pro", until: until), .init(id: "no_ads", until: until)], answered))
        #expect(ConformanceCheck.agrees([], ConformanceCheck.entitlements(fromCustomer: try JSONValue.parse(Array(#"{"entitlements":[]}"#.utf8)))))
    }

    @Test("events: each once and in order; missing, duplicated, out of order and unexpected counted apart")
    func events() {
        let expected: [EventType] = [.subscriptionStarted, .subscriptionRenewed, .subscriptionRenewed, .subscriptionExpired]
        #expect(ConformanceCheck.compare(expected: expected, received: expected).isClean)
        let duplicated = ConformanceCheck.compare(expected: expected, received: expected + [.subscriptionExpired])
        #expect(duplicated == .init(missing: 0, duplicated: 1, outOfOrder: 0, unexpected: 0))
        let missing = ConformanceCheck.compare(expected: expected, received: [.subscriptionStarted, .subscriptionRenewed])
        #expect(missing == .init(missing: 2, duplicated: 0, outOfOrder: 0, unexpected: 0))
        let reordered = ConformanceCheck.compare(
            expected: expected, received: [.subscriptionStarted, .subscriptionExpired, .subscriptionRenewed, .subscriptionRenewed])
        #expect(reordered == .init(missing: 0, duplicated: 0, outOfOrder: 1, unexpected: 0))
        let other = ConformanceCheck.compare(expected: [.subscriptionStarted], received: [.subscriptionStarted, .subscriptionRefunded])
        #expect(other == .init(missing: 0, duplicated: 0, outOfOrder: 0, unexpected: 1))
    }

    @Test("the report counts per scenario, keeps each disagreement with its timeline and prints a table")
    func report() {
        let catalogue = ConformanceCatalogue(bundleID: "com.example.cf")
        let timeline = LifecycleGenerator(catalogue: catalogue, start: Self.at, days: 60, seed: 1).timeline(customer: 3)
        var report = ConformanceReport()
        report.customer(timeline.scenario)
        report.answer(timeline, .right, at: Self.at, expected: [], answered: [])
        report.answer(timeline, .wrong, at: Self.at, expected: [HeldEntitlement(id: "pro", until: nil)], answered: [])
        report.answer(timeline, .late, at: Self.at, expected: [], answered: [HeldEntitlement(id: "pro", until: nil)])
        report.events(timeline, user: 0, received: [])
        let tally = report.tallies[timeline.scenario]
        #expect(tally?.answersChecked == 3)
        #expect(tally?.wrong == 1)
        #expect(tally?.late == 1)
        #expect(tally?.eventsMissing == timeline.expectedEvents(user: 0).count)
        #expect(report.disagreements.count == 3)
        #expect(report.disagreements[0].description.contains(timeline.narrative))
        let lines = report.table.split(separator: "\n")
        #expect(lines.count == 3)
        #expect(lines[0].hasPrefix("scenario"))
        #expect(lines[1].hasPrefix(timeline.scenario.rawValue))
        #expect(lines[2].hasPrefix("total"))
        #expect(report.total.wrong == 1)
    }

    @Test("lateness per fault kind: p50 and p99 by nearest rank of the changes heard of; those never heard of counted apart")
    func lateness() {
        var report = ConformanceReport()
        #expect(report.latenessTable.isEmpty, "no fault made a notification late: no table")
        // 100 lost notifications found 1 to 100 minutes after Apple signed them, one never.
        for minute in 1...100 { report.late(.lost, by: Double(minute) * 60) }
        report.late(.lost, by: nil)
        report.late(.delayed, by: 7_200)
        let lost = report.latenessByKind[.lost]
        #expect(lost == ConformanceReport.Lateness(changes: 101, neverHeard: 1, p50: 50 * 60, p99: 99 * 60, max: 100 * 60))
        #expect(report.latenessByKind[.delayed]?.p99 == 7_200)
        let lines = report.latenessTable.split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        #expect(lines[0].hasPrefix("late by fault"))
        #expect(lines[1].hasPrefix("delayed") && lines[1].hasSuffix("2h 00m"))
        #expect(lines[2].hasPrefix("lost") && lines[2].contains("50m 00s") && lines[2].contains("1h 39m"), "\(lines[2])")
    }
}

@Suite("The backend's webhook stream")
struct ReceivedEventsTests {
    @Test("A repeated event id is ignored and counted, as the README tells a backend; two events of one type are two")
    func repeats() {
        let received = ReceivedEvents(deliveries: [
            ("e1", "u", .receiptValidated), ("e2", "u", .subscriptionStarted), ("e1", "u", .receiptValidated),
            ("e3", "u", .subscriptionRenewed), ("e4", "u", .subscriptionRenewed), ("e5", "v", .receiptValidated), ("e3", "u", .subscriptionRenewed),
        ])
        #expect(received.byUser["u"] == [.receiptValidated, .subscriptionStarted, .subscriptionRenewed, .subscriptionRenewed])
        #expect(received.byUser["v"] == [.receiptValidated])
        #expect(received.repeats == 2)
    }
}
