import Conformance
import Foundation
import SystemTesting
import Testing

/// The run's simulated time as the worker process ``Faults/workerKilled`` kills reads it: the
/// clock file its parent's ``SimulatedClock`` publishes to.
@Suite("The clock file: a child process reads the run's simulated time")
struct ClockFileTests {
    static func path() -> String { FileManager.default.temporaryDirectory.appendingPathComponent("clock-\(UUID().uuidString)").path }

    @Test("The reader reads the clock's time when published, and again after each jump, running at the machine's pace in between")
    func followsJumps() async throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let clock = SimulatedClock(start: start)
        clock.publish(to: try ClockFile.Writer(path: path))
        let reader = try ClockFile.Reader(path: path)
        // The same time within the microsecond the file rounds to and the instants between the two reads.
        #expect(abs(reader.now().timeIntervalSince(clock.now())) < 0.05, "\(reader.now()) vs \(clock.now())")
        clock.jump(to: start.addingTimeInterval(30 * 86_400))
        #expect(abs(reader.now().timeIntervalSince(clock.now())) < 0.05, "a month on: \(reader.now()) vs \(clock.now())")
        #expect(reader.now() >= start.addingTimeInterval(30 * 86_400))
        let before = reader.now()
        // A reader frozen between jumps would never get there.
        #expect(try await eventually(timeout: .seconds(5)) { reader.now().timeIntervalSince(before) >= 0.04 }, "it runs between jumps")
        // Backwards is no jump: the clock stays, and so does what the reader reads.
        clock.jump(to: start)
        #expect(reader.now() > start.addingTimeInterval(30 * 86_400))
    }

    @Test("A file nothing was published to yet is refused, not read as the machine's time")
    func unpublished() throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let writer = try ClockFile.Writer(path: path)
        #expect(throws: ClockFileError.self) { try ClockFile.Reader(path: path) }
        writer.publish(Date(timeIntervalSince1970: 1_800_000_000))
        #expect(throws: Never.self) { try ClockFile.Reader(path: path) }
        #expect(throws: ClockFileError.self) { try ClockFile.Reader(path: path + "-absent") }
    }
}
