import Foundation
import Logging
import Synchronization
import Telemetry
import Testing

@Suite("JSON log handler")
struct JSONLogHandlerTests {
    /// The lines a handler wrote, in order.
    final class Captured: Sendable {
        private let lines = Mutex<[[UInt8]]>([])

        var sink: JSONLogHandler.Sink { JSONLogHandler.Sink { line in self.lines.withLock { $0.append(line) } } }
        var raw: [[UInt8]] { lines.withLock { $0 } }
        var text: [String] { raw.map { String(decoding: $0, as: UTF8.self) } }

        /// Every line parsed; a line that is not one JSON object ending in `\n` fails the test.
        func objects(sourceLocation: SourceLocation = #_sourceLocation) throws -> [[String: Any]] {
            try raw.map { line in
                #expect(line.last == UInt8(ascii: "\n"), sourceLocation: sourceLocation)
                #expect(line.dropLast().contains(UInt8(ascii: "\n")) == false, "one line per event", sourceLocation: sourceLocation)
                return try #require(
                    try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any], sourceLocation: sourceLocation)
            }
        }
    }

    static let fixedTime = Date(timeIntervalSince1970: 1_700_000_000.123)

    func makeLogger(_ captured: Captured, label: String = "receiptq.test", provider: Logger.MetadataProvider? = nil) -> Logger {
        var logger = Logger(label: label) { label in
            JSONLogHandler(label: label, sink: captured.sink, metadataProvider: provider, now: { Self.fixedTime })
        }
        logger.logLevel = .trace
        return logger
    }

    @Test("ts, level, logger and msg come first, in that order; ts is RFC 3339 UTC with milliseconds")
    func fields() throws {
        let captured = Captured()
        makeLogger(captured).info("Worker started")
        #expect(captured.text == [#"{"ts":"2023-11-14T22:13:20.123Z","level":"info","logger":"receiptq.test","msg":"Worker started"}"# + "\n"])
        let object = try #require(try captured.objects().first)
        #expect(object.keys.sorted() == ["level", "logger", "msg", "ts"])

        // The live clock: the same shape.
        let live = Captured()
        Logger(label: "live") { JSONLogHandler(label: $0, sink: live.sink) }.error("Now")
        let ts = try #require(try live.objects().first?["ts"] as? String)
        #expect(ts.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/) != nil)
        let parsed = try #require(ISO8601DateFormatter.withFractionalSeconds.date(from: ts))
        #expect(abs(parsed.timeIntervalSinceNow) < 60)
    }

    @Test("Times before 1970 and at a second's end keep their milliseconds")
    func timestamps() throws {
        for (seconds, expected) in [
            (0.0, "1970-01-01T00:00:00.000Z"), (-0.25, "1969-12-31T23:59:59.750Z"),
            (951_782_399.999, "2000-02-28T23:59:59.999Z"), (951_782_400.5, "2000-02-29T00:00:00.500Z"),
        ] {
            let captured = Captured()
            Logger(label: "t") { JSONLogHandler(label: $0, sink: captured.sink, now: { Date(timeIntervalSince1970: seconds) }) }.info("x")
            #expect(try captured.objects().first?["ts"] as? String == expected)
        }
    }

    @Test("Every level is written by its name, and levels below the logger's are not written")
    func levels() throws {
        let captured = Captured()
        var logger = makeLogger(captured)
        for level in Logger.Level.allCases { logger.log(level: level, "Level") }
        #expect(try captured.objects().map { $0["level"] as? String } == Logger.Level.allCases.map(\.rawValue))
        #expect(Logger.Level.allCases.map(\.rawValue) == ["trace", "debug", "info", "notice", "warning", "error", "critical"])

        let filtered = Captured()
        logger = makeLogger(filtered)
        logger.logLevel = .notice
        logger.debug("Dropped")
        logger.info("Dropped")
        logger.notice("Kept")
        logger.critical("Kept")
        #expect(try filtered.objects().map { $0["level"] as? String } == ["notice", "critical"])
    }

    @Test("Quotes, backslashes and control characters are escaped; non-ASCII stays UTF-8; every line parses")
    func escaping() throws {
        let captured = Captured()
        let nasty = "quote \" backslash \\ slash / newline \n return \r tab \t nul \u{0} bell \u{7} esc \u{1B} del \u{7F} é 日本 🧾 \u{2028}"
        let logger = makeLogger(captured, label: "label \"with\" \\ and \n")
        logger.warning("Message", metadata: ["key \"quoted\"\n": "\(nasty)", "user.id": .string(nasty)])
        let text = try #require(captured.text.first)
        // Control characters never reach the line raw: it stays one line.
        #expect(!text.dropLast().unicodeScalars.contains { $0.value < 0x20 })
        #expect(text.contains(#"\u0000"#) && text.contains(#"\u0007"#) && text.contains(#"\u001b"#))
        #expect(text.contains(#"\n"#) && text.contains(#"\r"#) && text.contains(#"\t"#) && text.contains(#"\""#) && text.contains(#"\\"#))
        #expect(text.contains("é 日本 🧾"), "non-ASCII is written as UTF-8, not \\u escapes")
        let object = try #require(try captured.objects().first)
        #expect(object["user.id"] as? String == nasty)
        #expect(object["key \"quoted\"\n"] as? String == nasty)
        #expect(object["logger"] as? String == "label \"with\" \\ and \n")

        // Every control character, one by one, round-trips through JSONSerialization.
        let all = String(String.UnicodeScalarView((0..<0x20).compactMap(Unicode.Scalar.init)))
        logger.info("\(all)")
        #expect(try captured.objects().last?["msg"] as? String == all)
    }

    @Test("Handler, provider and call metadata merge, later ones winning; dotted keys stay flat; nested values are JSON")
    func metadataMerge() throws {
        let captured = Captured()
        let provider = Logger.MetadataProvider { ["request.id": "from-provider", "app.id": "from-provider"] }
        var logger = makeLogger(captured, provider: provider)
        logger[metadataKey: "worker.id"] = "w-1"
        logger[metadataKey: "app.id"] = "from-handler"
        logger[metadataKey: "job.id"] = "from-handler"
        logger.info(
            "Job settled",
            metadata: [
                "job.id": "from-call", "job.attempt": .stringConvertible(3),
                "job.calls": .array(["production", .dictionary(["endpoint": "sandbox", "status": "0"])]),
                "migrations.applied": .dictionary(["first": "0001", "list": ["0001", "0002"]]),
            ])
        let object = try #require(try captured.objects().first)
        #expect(object["worker.id"] as? String == "w-1")
        #expect(object["app.id"] as? String == "from-provider", "the provider overrides the handler")
        #expect(object["request.id"] as? String == "from-provider")
        #expect(object["job.id"] as? String == "from-call", "the call overrides everything")
        #expect(object["job.attempt"] as? String == "3")
        #expect(object["job"] == nil, "dotted keys are not nested")
        let calls = try #require(object["job.calls"] as? [Any])
        #expect(calls.first as? String == "production")
        #expect((calls.last as? [String: String]) == ["endpoint": "sandbox", "status": "0"])
        let applied = try #require(object["migrations.applied"] as? [String: Any])
        #expect(applied["list"] as? [String] == ["0001", "0002"])
        // Metadata keys follow the four fixed fields, sorted.
        let text = try #require(captured.text.first)
        let keys = ["\"app.id\"", "\"job.attempt\"", "\"job.calls\"", "\"job.id\"", "\"migrations.applied\"", "\"request.id\"", "\"worker.id\""]
        let positions = keys.map { text.range(of: $0)?.lowerBound }
        #expect(positions.allSatisfy { $0 != nil } && positions == positions.sorted { $0! < $1! })
        #expect(text.range(of: "\"msg\"")!.lowerBound < positions[0]!)

        // The handler's metadata is a value: another logger's is untouched.
        let other = makeLogger(captured)
        other.info("Other")
        #expect(try captured.objects().last?["worker.id"] == nil)
    }

    @Test("An error becomes error.message and error.type; metadata cannot shadow the fixed fields")
    func errorsAndReservedKeys() throws {
        struct Refusal: Error, CustomStringConvertible { var description: String { "Refusal(code): safe text" } }
        let captured = Captured()
        makeLogger(captured).error(
            "Store failed", error: Refusal(), metadata: ["msg": "shadow", "ts": "shadow", "level": "shadow", "logger": "shadow"])
        let object = try #require(try captured.objects().first)
        #expect(object["msg"] as? String == "Store failed")
        #expect(object["level"] as? String == "error")
        #expect(object["ts"] as? String == "2023-11-14T22:13:20.123Z")
        #expect(object["metadata.msg"] as? String == "shadow")
        #expect(object["metadata.logger"] as? String == "shadow")
        #expect(object["error.message"] as? String == "Refusal(code): safe text")
        #expect((object["error.type"] as? String)?.hasSuffix("Refusal") == true)
    }

    @Test("Lines written from many threads to one file never interleave")
    func concurrentWrites() async throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("json-log-\(UUID().uuidString).log")
        #expect(FileManager.default.createFile(atPath: url.path, contents: nil))
        defer { try? FileManager.default.removeItem(at: url) }
        let file = try FileHandle(forWritingTo: url)
        let descriptor = file.fileDescriptor
        let threads = 8
        let perThread = 300
        // Longer than PIPE_BUF (4096): a line written in pieces would show.
        let payload = String(repeating: "0123456789abcdef", count: 400)
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<threads {
                group.addTask {
                    let logger = Logger(label: "thread-\(thread)") { JSONLogHandler(label: $0, sink: .fileDescriptor(descriptor)) }
                    for index in 0..<perThread {
                        logger.info("Line", metadata: ["line.index": "\(index)", "line.payload": "\(payload)"])
                    }
                }
            }
        }
        try file.close()
        let lines = try Data(contentsOf: url).split(separator: UInt8(ascii: "\n"))
        #expect(lines.count == threads * perThread)
        var seen = Set<String>()
        for line in lines {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
            #expect(object["line.payload"] as? String == payload)
            seen.insert("\(object["logger"] ?? "")/\(object["line.index"] ?? "")")
        }
        #expect(seen.count == threads * perThread)
    }
}

extension ISO8601DateFormatter {
    fileprivate static var withFractionalSeconds: ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}
