import Foundation
import SystemTesting

/// Receipts posted at a steady rate to a ``TestSystem`` while faults are injected, and what each
/// request was answered (the failover tests').
public struct SteadyLoad {
    /// Status per receipt number (0: no answer).
    public var statuses: [Int: Int] = [:]
    /// When each receipt's request was sent, and when its answer came.
    public var sent: [Int: ContinuousClock.Instant] = [:]
    public var answered: [Int: ContinuousClock.Instant] = [:]
    public var acknowledged: Set<Int> { Set(statuses.filter { (200..<300).contains($0.value) }.keys) }

    /// The receipts sent within `window`.
    public func sent(within window: ClosedRange<ContinuousClock.Instant>) -> Set<Int> {
        Set(sent.filter { window.contains($0.value) }.keys)
    }

    /// Posts `receipt` as number `number` until it is acknowledged (a minute at most); whether it was.
    public mutating func postOnceMore(_ receipt: String, number: Int, users: String = "fo-", to system: TestSystem) async throws -> Bool {
        var status = 0
        let sent = ContinuousClock.now
        let taken = try await eventually(timeout: .seconds(60)) {
            status = (try? await system.post(#"{"receipt":"\#(receipt)","user_identifier":"\#(users)\#(number)"}"#).0) ?? 0
            return (200..<300).contains(status)
        }
        (statuses[number], self.sent[number], answered[number]) = (status, sent, .now)
        return taken
    }

    /// Posts `receipts` at `perSecond`, each as user `<users><n>`, running `events[n]` (in the
    /// background) when receipt `n` is due.
    public static func post(
        _ receipts: [String], perSecond: Double, to system: TestSystem, users: String = "fo-",
        events: [Int: @Sendable () async throws -> Void] = [:]
    ) async throws -> SteadyLoad {
        let start = ContinuousClock.now
        var load = SteadyLoad()
        try await withThrowingTaskGroup(of: (Int, Int, ContinuousClock.Instant, ContinuousClock.Instant)?.self) { group in
            for (n, receipt) in receipts.enumerated() {
                // A pacer, not a wait: the load's rate is the scenario (receipt n is due at n / perSecond).
                try await Task.sleep(until: start + .seconds(Double(n) / perSecond), clock: .continuous)
                if let event = events[n] {
                    group.addTask {
                        try await event()
                        return nil
                    }
                }
                group.addTask {
                    let sent = ContinuousClock.now
                    let status = try? await system.post(#"{"receipt":"\#(receipt)","user_identifier":"\#(users)\#(n)"}"#).0
                    return (n, status ?? 0, sent, .now)
                }
            }
            for try await answer in group {
                if let (n, status, sent, answered) = answer {
                    load.statuses[n] = status
                    load.sent[n] = sent
                    load.answered[n] = answered
                }
            }
        }
        return load
    }
}
