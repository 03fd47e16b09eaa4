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
            ("unknown", .other), ("", .other),
            // A webhook delivery's failure before FailureCode: libcurl's name alone, read as the
            // transport failure it was.
            ("timeout", .network),
        ])
    func classes(code: String, expected: FailureClass) {
        #expect(FailureCode(rawValue: code).failureClass == expected)
    }

    @Test("A job without an error code (an unreadable job) counts as other")
    func missingCode() {
        var tally = ActivityTally()
        tally.add(.dead, failure: nil)
        #expect(tally.failures == [.other: 1])
    }

    @Test("Stored codes are read whole: a code that merely contains another's prefix is not of its class")
    func prefixesAreAnchored() {
        #expect(FailureCode(rawValue: "my_transport_error") == .unrecognized("my_transport_error"))
        #expect(FailureCode(rawValue: "my_transport_error").failureClass == .other)
        #expect(FailureCode(rawValue: "not_http_503").failureClass == .other)
        #expect(FailureCode(rawValue: "http_").failureClass == .other)
        #expect(FailureCode(rawValue: "apple_21005x").failureClass == .other)
        // `apple_21004` would be a transient Apple status by its prefix; it is ours to fix.
        #expect(FailureCode(rawValue: "apple_21004").failureClass == .configuration)
    }

    @Test("Every failure's stable string reads back to it, and each simple case has its own string")
    func stableStrings() {
        var codes = FailureCode.everySimpleCase
        codes += TransportFailure.allCases.map { FailureCode.transport($0) }
        codes += [.http(503), .http(429), .apple(21005), .apple(4_040_010), .unrecognized("retired_code")]
        for code in codes {
            #expect(FailureCode(rawValue: code.rawValue) == code, "\(code)")
        }
        #expect(Set(codes.map(\.rawValue)).count == codes.count)
        #expect(FailureCode(text: "  shared_secret_mismatch ") == .sharedSecretMismatch)
        #expect(FailureCode(text: " ") == nil && FailureCode(text: nil) == nil)
    }

    @Test("A tally counts every outcome, and a failure class only for retried and dead jobs")
    func tally() {
        var tally = ActivityTally()
        #expect(tally.isEmpty)
        tally.add(.validated)
        tally.add(.validated, failure: .transport(.timeout))  // a verdict has no failure, whatever is passed
        tally.add(.invalid)
        tally.add(.retried, failure: .transport(.timeout))
        tally.add(.retried, failure: .apple(21005))
        tally.add(.dead, failure: .sharedSecretMismatch)
        tally.add(.dead)
        tally.add(.deferred, failure: .http(503))  // deferred is the circuit's doing, not a failure
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
        one.add(.retried, failure: .storeUnavailable)
        #expect(one == ActivityTally(outcomes: [.retried: 1], failures: [.store: 1]))
        #expect(ActivityTally().verdicts == 0)
    }
}
