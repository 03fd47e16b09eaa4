import Foundation
import ReceiptCore

/// The fetcher's hold on the shared import budget (``ImportRateBudget``): whether an import's
/// validation may call Apple now, at a booked time within ``bookingAhead``, or not before a later
/// time (then it waits in the retry set, and the fetcher reserves no import job until then).
///
/// **Threads.** The fetcher thread only (the budget is a blocking Redis client).
final class ImportBudgetGate {
    /// The furthest ahead a call books its token and waits in its slot; beyond it the job leaves
    /// the slot for the retry set, so a spent budget never holds live traffic's slots.
    static let bookingAhead: TimeInterval = 2

    /// Validations per second per app; 0: imports have no budget of their own.
    let rate: Double
    private let make: () throws -> (any ImportRateBudget)?
    private var budget: (any ImportRateBudget)?
    /// The latest time a slot was refused until: no import job is reserved before it, so a spent
    /// budget does not churn jobs between the queue and the retry set.
    private var pausedUntil: Date?

    init(rate: Double, make: @escaping () throws -> (any ImportRateBudget)?) {
        self.rate = rate
        self.make = make
    }

    /// Whether import jobs should not be reserved now (a slot was refused until later).
    func isPaused(now: Date) -> Bool { pausedUntil.map { $0 > now } ?? false }

    /// The slot of one import validation for `app` (its bundle id).
    func slot(app: String, now: Date) -> ServerAPISlot {
        guard rate > 0 else { return .now }
        let slot: ServerAPISlot
        do {
            if budget == nil { budget = try make() }
            guard let budget else { return .now }
            slot = try budget.reserveImport(app: app, ratePerSecond: rate, now: now, bookingAhead: Self.bookingAhead)
        } catch {
            // An import is never urgent: without the budget's word it waits a second rather than
            // risk Apple's limit. A new connection is made on the next ask.
            budget = nil
            slot = .later(now.addingTimeInterval(1))
        }
        if case .later(let until) = slot { pausedUntil = max(pausedUntil ?? until, until) }
        return slot
    }
}
