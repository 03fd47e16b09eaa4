import Foundation
import MockAppStore
import ReceiptCore
import ReceiptTesting
import Synchronization
import Testing

/// The in-process systems of the test run answer on `ServerThreads`, not on the cooperative pool
/// that every test shares.
@Suite("In-process servers answer while the cooperative pool is blocked", .enabled(if: TestEnvironment.integrationEnabled))
struct ServerThreadsTests {
    @Test("A receipt is validated end to end while every cooperative thread waits for that answer")
    func answersWithThePoolBlocked() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()

        // One blocker per cooperative thread (the pool is as wide as the machine). Each blocks
        // until the probe has its answer: if any server of the system needed the pool, the probe
        // would wait for the blockers and the blockers for the probe, until the blockers give up.
        let width = ProcessInfo.processInfo.activeProcessorCount
        let release = DispatchSemaphore(value: 0)
        let started = StartCount()
        let blockers = (0..<width).map { _ in
            Task.detached {
                started.count.add(1, ordering: .sequentiallyConsistent)
                return release.wait(timeout: .now() + 60) == .success
            }
        }
        let probe = Task(executorPreference: ServerThreads.shared) {
            defer { for _ in 0..<width { release.signal() } }
            while started.count.load(ordering: .sequentiallyConsistent) < width { try await Task.sleep(for: .milliseconds(5)) }
            return try await system.post(#"{"receipt":"\#(receipt)","user_identifier":"pool-blocked"}"#)
        }
        let (status, body) = try await probe.value
        var released: [Bool] = []
        for blocker in blockers { released.append(await blocker.value) }

        #expect(released == Array(repeating: true, count: width), "the blockers gave up: the probe had no answer in 60 s")
        #expect(status == 200)
        #expect(body?["validation_status"]?.stringValue == "valid")
    }
}

private final class StartCount: Sendable {
    let count = Atomic<Int>(0)
}
