import Foundation
import ReceiptCore

// TEMPORARY until the batched record lands in ReceiptCore (branch circuit-batch).
extension OutageCircuit {
    @discardableResult
    func record(successes: Int, outages: Int, now: Date) throws -> CircuitTransition? {
        var last: CircuitTransition?
        for _ in 0..<successes { if let t = try record(outage: false, now: now) { last = t } }
        for _ in 0..<outages { if let t = try record(outage: true, now: now) { last = t } }
        return last
    }
}
