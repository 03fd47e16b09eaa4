import Foundation

extension IngestRow {

    struct WrkCommand {
        var wrk: String
        var script: String
        var url: String
        var settings: Settings

        func arguments(seconds: Double) -> [String] {
            [
                "-t", String(settings.threads), "-c", String(settings.connections), "-d", "\(Int(seconds.rounded(.up)))s",
                "--timeout", "5s", "--latency", "-s", script, url,
            ]
        }

        /// Runs wrk to completion and parses the Lua script's report.
        func run(seconds: Double) throws -> WrkReport {
            let output = ChildProcess.run(wrk, arguments(seconds: seconds), timeout: seconds + 60)
            guard output.status == 0 else { throw BenchFailure(description: "wrk exited \(output.status):\n\(output.output.suffix(1_000))") }
            return try WrkReport(output: output.output)
        }

        /// Starts wrk and returns at once (for the profiled run).
        func start(seconds: Double, logDirectory: URL) throws -> ChildProcess {
            try ChildProcess(
                executable: URL(fileURLWithPath: wrk), arguments: arguments(seconds: seconds), environment: ProcessInfo.processInfo.environment,
                label: "wrk-profile", logDirectory: logDirectory)
        }
    }

    /// What the Lua `done()` prints: one line `RECEIPTQ_WRK {json}`.
    struct WrkReport {
        var requests: Int
        var durationSeconds: Double
        /// µs: min, mean, p50, p90, p99, p999, max.
        var latency: [String: Double]
        var statuses: [String: Int]
        var socketErrors: [String: Int]

        var rps: Double { durationSeconds > 0 ? Double(requests) / durationSeconds : .nan }
        var ok: Int { statuses.filter { (Int($0.key) ?? 0) / 100 == 2 }.values.reduce(0, +) }
        var non2xx: Int { statuses.values.reduce(0, +) - ok }

        init(output: String) throws {
            guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("RECEIPTQ_WRK ") }),
                let object = try? JSONSerialization.jsonObject(with: Data(line.dropFirst("RECEIPTQ_WRK ".count).utf8)) as? [String: Any]
            else { throw BenchFailure(description: "no report from the wrk script in:\n\(output.suffix(1_000))") }
            func double(_ value: Any?) -> Double { (value as? NSNumber)?.doubleValue ?? .nan }
            requests = (object["requests"] as? NSNumber)?.intValue ?? 0
            durationSeconds = double(object["duration_us"]) / 1_000_000
            latency = (object["latency_us"] as? [String: Any] ?? [:]).mapValues(double)
            statuses = (object["statuses"] as? [String: Any] ?? [:]).mapValues { ($0 as? NSNumber)?.intValue ?? 0 }
            // wrk's own "status" error counts responses ≥ 400, which the statuses already hold.
            socketErrors = (object["errors"] as? [String: Any] ?? [:]).filter { $0.key != "status" }.mapValues {
                ($0 as? NSNumber)?.intValue ?? 0
            }
        }
    }

    /// The wrk script: POSTs of every (receipt, app) pair in turn (receipt first, then app, threads
    /// interleaved, so no pair repeats before all have been sent), every response counted by
    /// status (per thread, summed in `done`), and exact percentiles from wrk's histogram printed as
    /// one JSON line. Bodies and tokens are read from files, one per line.
    static func luaScript(
        bodies: String, tokens: String, threads: Int, path: String = IngestRow.path, contentType: String = "application/json"
    ) -> String {
        """
        -- Written by receiptq-bench ingest.
        local bodies = {}
        for line in io.lines("\(bodies)") do table.insert(bodies, line) end
        local headers = {}
        for token in io.lines("\(tokens)") do
           table.insert(headers, {["Content-Type"] = "\(contentType)", ["Authorization"] = "Bearer " .. token})
        end
        local path = "\(path)"

        local threads = {}

        function setup(thread)
           thread:set("id", #threads)
           table.insert(threads, thread)
        end

        function init(args)
           statuses = {}
           serial = id
        end

        function request()
           local n = serial
           serial = serial + \(threads)
           local body = bodies[n % #bodies + 1]
           local app = headers[math.floor(n / #bodies) % #headers + 1]
           return wrk.format("POST", path, app, body)
        end

        function response(status, headers, body)
           statuses[status] = (statuses[status] or 0) + 1
        end

        function done(summary, latency, requests)
           local counts = {}
           for _, thread in ipairs(threads) do
              for status, n in pairs(thread:get("statuses") or {}) do
                 counts[status] = (counts[status] or 0) + n
              end
           end
           local parts = {}
           for status, n in pairs(counts) do
              table.insert(parts, string.format('"%d":%d', status, n))
           end
           local e = summary.errors
           io.write(string.format(
              'RECEIPTQ_WRK {"duration_us":%.0f,"requests":%.0f,"bytes":%.0f,' ..
              '"errors":{"connect":%.0f,"read":%.0f,"write":%.0f,"status":%.0f,"timeout":%.0f},' ..
              '"latency_us":{"min":%.0f,"mean":%.1f,"p50":%.0f,"p90":%.0f,"p99":%.0f,"p999":%.0f,"max":%.0f},' ..
              '"statuses":{%s}}\\n',
              summary.duration, summary.requests, summary.bytes,
              e.connect, e.read, e.write, e.status, e.timeout,
              latency.min, latency.mean, latency:percentile(50), latency:percentile(90),
              latency:percentile(99), latency:percentile(99.9), latency.max,
              table.concat(parts, ",")))
        end

        """
    }
}
