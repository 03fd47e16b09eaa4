import ReceiptCore
import ReceiptQueueApp
import SystemTesting
import Testing

/// The notification-aware re-poll settings read from the environment (README's configuration table).
@Suite("Configuration: notification-aware re-polls", .blockingWork)
struct RepollSafetyNetConfigurationTests {
    @Test("Documented defaults (6 h window, 1 day grace); both variables reach the rule; 0 turns it off")
    func values() throws {
        #expect(try AppConfiguration(environment: [:]).scheduler.repollSafetyNet == RepollSafetyNet())
        #expect(try AppConfiguration(environment: [:]).scheduler.repollSafetyNet.freshWindow == .seconds(21_600))
        #expect(try AppConfiguration(environment: [:]).scheduler.repollSafetyNet.grace == .seconds(86_400))
        let set = try AppConfiguration(environment: [
            "REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS": "3600", "REPOLL_SAFETY_NET_GRACE_SECONDS": "7200",
        ]).scheduler.repollSafetyNet
        #expect(set == RepollSafetyNet(freshWindow: .seconds(3600), grace: .seconds(7200)))
        let off = try AppConfiguration(environment: ["REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS": "0"]).scheduler.repollSafetyNet
        #expect(off.freshWindow == .zero)
    }

    @Test(
        "A bad value is refused, naming its variable",
        arguments: [
            ("REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS", "-1"), ("REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS", "6h"),
            ("REPOLL_NOTIFICATIONS_FRESH_WINDOW_SECONDS", "2592001"), ("REPOLL_SAFETY_NET_GRACE_SECONDS", "-5"),
            ("REPOLL_SAFETY_NET_GRACE_SECONDS", "1.5"),
        ])
    func refused(_ variable: String, _ value: String) {
        let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: [variable: value]) }
        #expect(error?.variable == variable)
    }
}
