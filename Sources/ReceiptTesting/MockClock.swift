import Foundation
import Synchronization

/// A clock the test moves by hand, injected wherever production code takes `now: () -> Date`.
public final class MockClock: Sendable {
    private let current: Mutex<Date>

    /// A clock standing at `start`.
    public init(start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = Mutex(start) }

    /// The clock's time.
    public var now: Date { current.withLock { $0 } }

    /// Moves the clock forward to `date` (never back).
    public func advance(to date: Date) { current.withLock { $0 = max($0, date) } }

    /// Moves the clock forward by `seconds`.
    public func advance(by seconds: TimeInterval) { current.withLock { $0 = $0.addingTimeInterval(max(0, seconds)) } }

    /// The clock as the `now` closure services take.
    public var closure: @Sendable () -> Date { { self.now } }
}
