import Foundation
import Synchronization

/// The one clock a conformance run's whole system reads (injected as `now`, never global): it
/// runs at the machine's pace between the driver's jumps, so whatever waits on it (a re-poll due,
/// a pause after Apple's 429) still comes due while the driver waits for the system, and jumps
/// forward to the next moment of the customers' timelines. Never backwards. A process of the run's
/// own (the worker ``Faults/workerKilled`` kills) reads it through a ``ClockFile`` it publishes to.
public final class SimulatedClock: Sendable {
    private struct State {
        var base: Date
        var anchor: ContinuousClock.Instant
        var published: ClockFile.Writer? = nil
    }

    private let state: Mutex<State>

    /// A clock standing at `start` now.
    public init(start: Date) { state = Mutex(State(base: start, anchor: .now)) }

    /// The simulated time.
    public func now() -> Date { state.withLock { Self.time(&$0) } }

    private static func time(_ state: inout State) -> Date {
        let elapsed = ContinuousClock.now - state.anchor
        return state.base.addingTimeInterval(Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18)
    }

    /// Moves the clock to `date` if it is ahead (else leaves it running).
    public func jump(to date: Date) {
        state.withLock { state in
            guard date > Self.time(&state) else { return }
            state.base = date
            state.anchor = .now
            state.published?.publish(date)
        }
    }

    /// From now on writes the simulated time to `file` at each jump (and now, before returning).
    public func publish(to file: ClockFile.Writer) {
        state.withLock { state in
            state.published = file
            file.publish(Self.time(&state))
        }
    }

    /// The clock as the `now` closure services take.
    public var closure: @Sendable () -> Date { { self.now() } }
}
