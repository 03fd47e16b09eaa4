import Curl
import DevTools
import Foundation
import MockAppStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import Synchronization
import SystemTesting
import Testing

/// The in-process systems of the test run answer on `ServerThreads`, not on the cooperative pool
/// that every test shares.
@Suite("In-process servers answer while the cooperative pool is blocked", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct ServerThreadsTests {
    @Test("The API and the mock App Store answer while every cooperative thread waits for their answers")
    func answersWithThePoolBlocked() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }

        // One blocker per cooperative thread (the pool is as wide as the machine). Each blocks
        // until the probe has its answers: if a server needed the pool, the probe would wait for
        // the blockers and the blockers for the probe, until the client's timeout. The probes are
        // light on purpose: while they run, every other test of the run waits too.
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
            let blocked = try await eventually(timeout: .seconds(20), interval: .milliseconds(5)) {
                started.count.load(ordering: .sequentiallyConsistent) >= width
            }
            #expect(blocked, "every cooperative thread is held by a blocker")
            let (live, _) = try await system.get(path: "/health/live")
            let apple = try await system.client.sendNamingFailure(
                Curl.HTTPRequest(
                    method: "POST", url: system.mock.productionURL, headers: [(name: "Content-Type", value: "application/json")],
                    body: Array("{}".utf8)))
            return (live, apple.status, String(decoding: apple.body, as: UTF8.self))
        }
        let (live, appleStatus, appleBody) = try await probe.value
        var released: [Bool] = []
        for blocker in blockers { released.append(await blocker.value) }

        #expect(released == Array(repeating: true, count: width), "the blockers gave up: the probe had no answer in 60 s")
        #expect(live == 200)
        #expect(appleStatus == 200)
        #expect(appleBody.contains("21000"), "no receipt-data: Apple's 21000")
    }
}

private final class StartCount: Sendable {
    let count = Atomic<Int>(0)
}
