import Foundation
import ReceiptCore

extension AdminPages {
    /// The overview's banner about Apple's `verifyReceipt`, or nil while it answers and announces
    /// nothing: an alarm once it is gone or past its sunset (what happened, and what happens to the
    /// apps now), a warning in the 90 days before an announced sunset, a note for a deprecation.
    static func verifyReceiptBanner(_ lifecycle: VerifyReceiptLifecycle, now: Date) -> [String: Any]? {
        let consequence =
            "Apps on the auto backend with an In-App Purchase key validate through the App Store Server API; "
            + "apps without a key cannot be validated until they get one (receiptq apps server-api-key)"
        if let gone = lifecycle.goneSince {
            return [
                "level": "alarm",
                "text": "Apple's verifyReceipt is gone: it has answered HTTP 404/410 across the deployment since \(utc(gone)) UTC. "
                    + consequence + ".",
            ]
        }
        if let sunset = lifecycle.sunset {
            if sunset <= now {
                return [
                    "level": "alarm",
                    "text": "Apple's verifyReceipt passed its announced sunset (\(utc(sunset)) UTC). "
                        + consequence + ".",
                ]
            }
            if lifecycle.sunsetIsNear(at: now) {
                let days = Int((sunset.timeIntervalSince(now) / 86_400).rounded(.up))
                return [
                    "level": "warning",
                    "text": "Apple's verifyReceipt announces its sunset for \(utc(sunset)) UTC, in \(days) day\(days == 1 ? "" : "s"). "
                        + "Give every app an In-App Purchase key (receiptq apps server-api-key) before then.",
                ]
            }
        }
        if let deprecation = lifecycle.deprecation {
            var text = "Apple's verifyReceipt is deprecated (announced for \(utc(deprecation)) UTC)"
            if let sunset = lifecycle.sunset { text += "; its sunset is \(utc(sunset)) UTC" }
            return ["level": "notice", "text": text + "."]
        }
        return nil
    }
}
