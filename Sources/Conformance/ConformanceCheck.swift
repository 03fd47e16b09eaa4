import Foundation
import ReceiptCore

/// How one answer of the entitlement API compares with the ground truth.
public enum AnswerVerdict: Sendable, Equatable {
    /// Right when asked.
    case right
    /// Wrong when asked, right by the time the system had heard from Apple and the allowed lag
    /// (a delayed or lost notification) had passed.
    case late
    /// Wrong, and still wrong once the system had heard from Apple.
    case wrong
}

/// The comparisons the suite makes, pure: an answer with the truth, a webhook stream with the
/// expected events.
public enum ConformanceCheck {
    /// Dates closer than this are the same: Apple's milliseconds, the mock dating a recovered
    /// renewal a second back, and the simulated clock running on between a jump and the mock's
    /// answer (well under a second of machine time).
    public static let dateTolerance: TimeInterval = 5

    /// The entitlements a `GET /client/customers/{user}` answer states: each id with its
    /// `expires_date` (the API's `{"utc", "ms"}`; absent: for good).
    public static func entitlements(fromCustomer answer: JSONValue) -> [HeldEntitlement] {
        (answer["entitlements"]?.arrayValue ?? []).compactMap { entitlement in
            guard let id = entitlement["id"]?.stringValue else { return nil }
            let until = entitlement["expires_date"]?["ms"]?.intValue.map { Date(timeIntervalSince1970: Double($0) / 1000) }
            return HeldEntitlement(id: id, until: until)
        }.sorted()
    }

    /// Whether `answered` states exactly `expected`: the same ids, each until the same instant.
    public static func agrees(_ expected: [HeldEntitlement], _ answered: [HeldEntitlement]) -> Bool {
        let expected = expected.sorted()
        let answered = answered.sorted()
        guard expected.map(\.id) == answered.map(\.id) else { return false }
        return zip(expected, answered).allSatisfy { want, got in
            switch (want.until, got.until) {
            case (nil, nil): true
            case (let want?, let got?): abs(want.timeIntervalSince(got)) <= dateTolerance
            default: false
            }
        }
    }

    /// The events that tell of a change of what the customer is entitled to: never excused, even
    /// for an app without notifications (the others, such as auto-renew turned off, a polled
    /// backend may not hear as they happened: ``ConformanceReport/unseenByPolls``).
    public static let entitlementChanges: Set<EventType> = [
        .receiptValidated, .purchaseRefunded, .subscriptionStarted, .subscriptionRenewed, .subscriptionBillingIssue,
        .subscriptionGracePeriodStarted, .subscriptionBillingRecovered, .subscriptionExpired, .subscriptionRefunded,
        .subscriptionRevoked, .subscriptionUpgraded, .subscriptionExtended,
    ]

    /// How the events one user's backend received compare with the events expected, each once
    /// and in order.
    public struct EventComparison: Sendable, Equatable {
        /// Expected, never received.
        public var missing: Int
        /// Received more often than expected.
        public var duplicated: Int
        /// Received, expected, but not in the expected order (what the longest common order leaves out).
        public var outOfOrder: Int
        /// Received, of a type not expected at all.
        public var unexpected: Int

        public init(missing: Int, duplicated: Int, outOfOrder: Int, unexpected: Int) {
            self.missing = missing
            self.duplicated = duplicated
            self.outOfOrder = outOfOrder
            self.unexpected = unexpected
        }

        public var isClean: Bool { missing == 0 && duplicated == 0 && outOfOrder == 0 && unexpected == 0 }
    }

    /// Compares `received` (in the order the receiver got them) with `expected`.
    public static func compare(expected: [EventType], received: [EventType]) -> EventComparison {
        var wanted: [EventType: Int] = [:]
        for type in expected { wanted[type, default: 0] += 1 }
        var kept: [EventType] = []
        var seen: [EventType: Int] = [:]
        var duplicated = 0
        var unexpected = 0
        for type in received {
            seen[type, default: 0] += 1
            guard let limit = wanted[type] else {
                unexpected += 1
                continue
            }
            if seen[type]! > limit { duplicated += 1 } else { kept.append(type) }
        }
        let missing = expected.count - kept.count
        return EventComparison(
            missing: missing, duplicated: duplicated, outOfOrder: kept.count - longestCommonSubsequence(expected, kept), unexpected: unexpected)
    }

    static func longestCommonSubsequence(_ a: [EventType], _ b: [EventType]) -> Int {
        guard !a.isEmpty, !b.isEmpty else { return 0 }
        var previous = [Int](repeating: 0, count: b.count + 1)
        for x in a {
            var current = [Int](repeating: 0, count: b.count + 1)
            for (j, y) in b.enumerated() { current[j + 1] = x == y ? previous[j] + 1 : max(previous[j + 1], current[j]) }
            previous = current
        }
        return previous[b.count]
    }
}
