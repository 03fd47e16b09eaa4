import Foundation
import ReceiptCore

extension RepollPolicy {
    /// The longest a subscription of `period` goes without a poll on this policy's schedule, and
    /// so the longest a change Apple makes to it goes unheard by a deployment that gets no
    /// notification (a device's post aside): the bound the conformance suite's no-notification
    /// mode holds its ``Faults/Kind/repoll`` lateness to (plus its clock's hop).
    ///
    /// The gaps the schedule leaves, with the jitter at its widest: an active subscription is
    /// polled just after one expiry (finding the renewal) and next a lead before the following
    /// one, less than a period later; around an expiry, a lead before and a wait after it; in
    /// grace or billing retry, every trouble interval (a period at most); an expired one, once
    /// more a trouble interval after its end.
    public func longestSilence(period: TimeInterval) -> TimeInterval {
        let minimum = minDelay.seconds
        let lead = min(max(period * leadFraction, minimum), max(maxLead.seconds, minimum))
        let after = min(max(period * afterFraction, minimum), max(maxAfter.seconds, minimum))
        let trouble = max(min(troubleInterval.seconds, period), minimum)
        return Swift.max(period, (lead + after) * (1 + jitter), (trouble + after) * (1 + jitter))
    }
}
