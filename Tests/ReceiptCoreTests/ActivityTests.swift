import Foundation
import ReceiptCore
import Testing

@Suite("Activity: failure classes and tallies")
struct ActivityTests {
    @Test(
        "Every error code the worker writes falls in the class an operator acts on",
        arguments: [
            ("transport_timeout", FailureClass.network), ("transport_couldnt_connect", .network), ("transport_ssl", .network),
            ("http_503", .appleHTTP), ("http_429", .appleHTTP), ("non_json_body", .appleHTTP),
            ("apple_21005", .appleStatus), ("apple_21002", .appleStatus), ("apple_21199", .appleStatus), ("environment_loop", .appleStatus),
            ("shared_secret_mismatch", .configuration), ("apple_21004", .configuration), ("apple_21000", .configuration),
            ("unknown_app", .configuration),
            ("store_unavailable", .store), ("store_refused", .store),
            ("unknown", .other), ("", .other), ("timeout", .other),
        ])
    func classes(code: String, expected: FailureClass) {
        #expect(FailureClass(errorCode: code) == expected)
    }

    @Test("A job without an error code (an unreadable job) counts as other")
    func missingCode() {
        #expect(FailureClass(errorCode: nil) == .other)
    }

    @Test("Prefixes match at the start only, and exact codes win over their prefix's class")
    func prefixesAreAnchored() {
        #expect(FailureClass(errorCode: "my_transport_error") == .other)
        #expect(FailureClass(errorCode: "not_http_503") == .other)
        // `apple_21004` would be a transient Apple status by its prefix; it is ours to fix.
        #expect(FailureClass(errorCode: "apple_21004") == .configuration)
    }

    @Test("A tally counts every outcome, and a failure class only for retried and dead jobs")
    func tally() {
        var tally = ActivityTally()
        #expect(tally.isEmpty)
        tally.add(.validated)
        tally.add(.validated, errorCode: "transport_timeout")  // a verdict has no failure, whatever is passed
        tally.add(.invalid)
        tally.add(.retried, errorCode: "transport_timeout")
        tally.add(.retried, errorCode: "apple_21005")
        tally.add(.dead, errorCode: "shared_secret_mismatch")
        tally.add(.dead)
        tally.add(.deferred, errorCode: "http_503")  // deferred is the circuit's doing, not a failure
        #expect(!tally.isEmpty)
        #expect(tally.outcomes == [.validated: 2, .invalid: 1, .retried: 2, .dead: 2, .deferred: 1])
        #expect(tally.failures == [.network: 1, .appleStatus: 1, .configuration: 1, .other: 1])
        #expect(tally.verdicts == 3)
    }

    @Test("A tally holding only zeros is empty, and equal tallies compare equal")
    func emptiness() {
        #expect(ActivityTally(outcomes: [.validated: 0], failures: [.network: 0]).isEmpty)
        #expect(!ActivityTally(failures: [.store: 1]).isEmpty)
        var one = ActivityTally()
        one.add(.retried, errorCode: "store_unavailable")
        #expect(one == ActivityTally(outcomes: [.retried: 1], failures: [.store: 1]))
        #expect(ActivityTally().verdicts == 0)
    }
}
