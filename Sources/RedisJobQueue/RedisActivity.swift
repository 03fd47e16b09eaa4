import Foundation
import Hiredis
import ReceiptCore

/// The per-minute activity hashes (`RedisKeys.activity(minute:)`): how the worker writes them and
/// the overview reads them, in one place so the field names cannot drift apart.
enum RedisActivity {
    /// Two hours: the overview charts the last one, and a worker whose clock runs a little ahead or
    /// behind still writes into a minute that is read before it expires.
    static let retentionSeconds = 7_200

    /// The minute `date` falls in, as Unix seconds / 60.
    static func minute(of date: Date) -> Int64 { Int64((date.timeIntervalSince1970 / 60).rounded(.down)) }

    /// The start of a minute.
    static func date(ofMinute minute: Int64) -> Date { Date(timeIntervalSince1970: Double(minute) * 60) }

    static func field(_ outcome: ActivityOutcome) -> String { "o.\(outcome.rawValue)" }

    static func field(_ failure: FailureClass) -> String { "f.\(failure.rawValue)" }

    /// The commands that add `tally` to the minute of `now`; none for an empty tally, so an idle
    /// minute never creates a key.
    static func increments(_ tally: ActivityTally, keys: RedisKeys, now: Date) -> [[String]] {
        let key = keys.activity(minute: minute(of: now))
        var commands: [[String]] = []
        for outcome in ActivityOutcome.allCases {
            if let count = tally.outcomes[outcome], count > 0 { commands.append(["HINCRBY", key, field(outcome), String(count)]) }
        }
        for failure in FailureClass.allCases {
            if let count = tally.failures[failure], count > 0 { commands.append(["HINCRBY", key, field(failure), String(count)]) }
        }
        guard !commands.isEmpty else { return [] }
        commands.append(["EXPIRE", key, String(retentionSeconds)])
        return commands
    }

    /// A minute's tally from its `HGETALL` reply; fields this build does not know (written by a
    /// newer worker) are ignored, and a missing hash is an empty tally.
    static func tally(_ reply: RedisValue) -> ActivityTally {
        let fields = reply.array ?? []
        var tally = ActivityTally()
        for pair in stride(from: 0, to: fields.count - 1, by: 2) {
            guard let name = fields[pair].string, let count = fields[pair + 1].int else { continue }
            if let outcome = ActivityOutcome.allCases.first(where: { field($0) == name }) {
                tally.outcomes[outcome] = count
            } else if let failure = FailureClass.allCases.first(where: { field($0) == name }) {
                tally.failures[failure] = count
            }
        }
        return tally
    }
}
