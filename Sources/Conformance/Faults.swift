/// Apple's misbehaviour a run plays, each a switch.
public struct Faults: Sendable, Equatable {
    /// Every notification posted twice (Apple's retries and history replays).
    public var duplicates = false
    /// A share of notifications held back and released later, in reverse order: delayed by
    /// hours of simulated time, and out of order.
    public var delayedAndReordered = false
    /// A share of device posts meet a Server API 5xx or 429 first (the worker retries).
    public var appleErrors = false

    public init(duplicates: Bool = false, delayedAndReordered: Bool = false, appleErrors: Bool = false) {
        self.duplicates = duplicates
        self.delayedAndReordered = delayedAndReordered
        self.appleErrors = appleErrors
    }

    /// The named sets `--faults` takes.
    public enum Preset: String, Sendable, CaseIterable {
        case none, `default`, all
    }

    /// A preset's switches: `default` is what Apple does on a normal day (duplicates, delays
    /// and reordering); `all` adds Server API errors.
    public init(_ preset: Preset) {
        switch preset {
        case .none: self.init()
        case .default: self.init(duplicates: true, delayedAndReordered: true)
        case .all: self.init(duplicates: true, delayedAndReordered: true, appleErrors: true)
        }
    }
}
