/// Apple's misbehaviour a run plays, each a switch.
public struct Faults: Sendable, Equatable {
    /// Every notification posted twice (Apple's retries and history replays).
    public var duplicates = false
    /// A share of notifications held back and released later, in reverse order: delayed by
    /// hours of simulated time, and out of order.
    public var delayedAndReordered = false
    /// A share of device posts meet a Server API 5xx or 429 first (the worker retries).
    public var appleErrors = false
    /// A share of notifications never posted (Apple lost them), kept in Apple's Get Notification
    /// History for the deployment's history sweep to find.
    public var lostNotifications = false
    /// Apple's whole Server API down (503) for an hour of simulated time, from a device's post
    /// drawn at random: the workers retry with backoff until it is back.
    public var outage = false
    /// The deployment runs one of its workers as a process of its own and SIGKILLs it a few times
    /// per simulated month, at a device's post, once it holds jobs when it can, then starts it
    /// again: the janitor must give the dead worker's jobs back.
    public var workerKilled = false

    public init(
        duplicates: Bool = false, delayedAndReordered: Bool = false, appleErrors: Bool = false, lostNotifications: Bool = false,
        outage: Bool = false, workerKilled: Bool = false
    ) {
        self.duplicates = duplicates
        self.delayedAndReordered = delayedAndReordered
        self.appleErrors = appleErrors
        self.lostNotifications = lostNotifications
        self.outage = outage
        self.workerKilled = workerKilled
    }

    /// The named sets `--faults` takes: the presets, and one per fault kind alone.
    public enum Preset: String, Sendable, CaseIterable {
        case none, `default`, all, lost, outage, killed
    }

    /// A preset's switches: `default` is what Apple does on a normal day (duplicates, delays and
    /// reordering, lost notifications: Apple does lose some); `all` adds Server API errors, an
    /// hour's outage and a worker killed; `lost`, `outage` and `killed` are each that fault alone.
    public init(_ preset: Preset) {
        switch preset {
        case .none: self.init()
        case .default: self.init(duplicates: true, delayedAndReordered: true, lostNotifications: true)
        case .all:
            self.init(
                duplicates: true, delayedAndReordered: true, appleErrors: true, lostNotifications: true, outage: true, workerKilled: true)
        case .lost: self.init(lostNotifications: true)
        case .outage: self.init(outage: true)
        case .killed: self.init(workerKilled: true)
        }
    }

    /// The kinds of fault that make the deployment hear of Apple's change late (a notification,
    /// or the answer to a device's post), each with its own lateness in the report.
    public enum Kind: String, Sendable, CaseIterable, Comparable {
        /// Held back and released later, out of order.
        case delayed
        /// Never posted; found by the history sweep.
        case lost
        /// A device's post made while Apple was down, answered once it was back.
        case outage
        /// Not a fault: an app without notifications (``ConformanceDriver/notifications`` off)
        /// hears of each of Apple's changes only when it next asks Apple about the subscription
        /// (a re-poll on the re-poll policy's schedule, or a device's post).
        case repoll

        public static func < (a: Kind, b: Kind) -> Bool { allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)! }
    }
}
