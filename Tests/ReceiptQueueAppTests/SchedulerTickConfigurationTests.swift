import ReceiptQueueApp
import SystemTesting
import Testing

/// `SCHEDULER_TICK_MS`, read from the environment (README's configuration table).
@Suite("Configuration: the scheduler's tick", .blockingWork)
struct SchedulerTickConfigurationTests {
    @Test("A second by default; the variable reaches the scheduler's configuration")
    func values() throws {
        #expect(try AppConfiguration(environment: [:]).scheduler.tickInterval == .seconds(1))
        #expect(try AppConfiguration(environment: ["SCHEDULER_TICK_MS": "20"]).scheduler.tickInterval == .milliseconds(20))
    }

    @Test("A bad value is refused, naming its variable", arguments: ["0", "9", "-20", "1s", "1.5", "60001"])
    func refused(_ value: String) {
        let error = #expect(throws: ConfigurationError.self) { try AppConfiguration(environment: ["SCHEDULER_TICK_MS": value]) }
        #expect(error?.variable == "SCHEDULER_TICK_MS")
    }
}
