import Conformance
import DevTools
import Foundation
import MockAppStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The conformance deployment's settling barrier and its re-polls on the simulated clock.
@Suite("The conformance deployment's settling", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct ConformanceSettleTests {
    @Test("A jump of the clock past a planned poll: settling returns only once the poll asked Apple and its answer was stored")
    func settleWaitsForDuePolls() async throws {
        let clock = SimulatedClock(start: Date().addingTimeInterval(60))
        let deployment = try await ConformanceDeployment.start(
            environment: TestSystem.serverEnvironment, clock: clock, notifications: false, logger: ConformanceCommandTests.quiet)
        do {
            let catalogue = ConformanceCatalogue(bundleID: deployment.bundleID)
            let (jws, payload) = try ReceiptForger.signedTransaction(
                bundleID: deployment.bundleID, productID: catalogue.productID(.monthly), days: 30, environment: "Production",
                authority: deployment.mock.serverAPI.authority, now: clock.now(), fields: [:])
            deployment.mock.serverAPI.add(transactions: [payload], environment: .production)
            let original = try #require(payload["originalTransactionId"]?.stringValue)
            #expect(try await deployment.postTransaction(jws, user: "settle-u1") == 200)
            try await deployment.settle()
            let due = try #require(try await deployment.nextPollDue(), "the purchase planned a poll")
            #expect(due > clock.now())

            clock.jump(to: due.addingTimeInterval(1))
            try await deployment.settle()
            #expect(deployment.mock.serverAPI.firstAnswer(about: original, in: .production, after: due) != nil, "the poll asked Apple")
            let next = try #require(try await deployment.nextPollDue())
            #expect(next > due, "the poll's answer planned the next one")
        } catch {
            await deployment.stop()
            throw error
        }
        await deployment.stop()
    }
}
