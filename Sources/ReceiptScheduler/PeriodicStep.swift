import Foundation
import Logging
import ReceiptCore
import Synchronization

/// The loop of a scheduler step that runs now and then every `interval` on its own thread (the
/// retention sweep, the revenue folding): `make` builds the step's connections, `body` does one
/// run with them. A failed run is logged and its connections dropped, so the next run starts on
/// fresh ones (the failed one may be gone). Returns within 50 ms of `stopping` turning true.
enum PeriodicStep {
    static func loop<Sides>(
        every interval: Duration, stopping: borrowing Atomic<Bool>, failure: Logger.Message, logger: Logger, make: () throws -> Sides,
        _ body: (Sides) throws -> Void
    ) {
        var sides: Sides?
        while !stopping.load(ordering: .relaxed) {
            do {
                if sides == nil { sides = try make() }
                if let sides { try body(sides) }
            } catch {
                sides = nil
                logger.warning(failure, error: error)
            }
            let end = Date().addingTimeInterval(interval.seconds)
            while !stopping.load(ordering: .relaxed), Date() < end { usleep(50_000) }
        }
    }
}
