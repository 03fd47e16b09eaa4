import Foundation

/// The Redis side of retention: the dead letters that died before a cutoff are dropped.
public protocol DeadLetterTrim: AnyObject {
    /// Removes up to `limit` dead letters that died before `cutoff`; returns how many.
    func trimDeadLetters(before cutoff: Date, limit: Int) throws -> Int
}
