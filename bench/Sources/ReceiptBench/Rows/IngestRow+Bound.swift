import Foundation

extension IngestRow {
    /// What the rate target (1.2× the peer's req/s) leaves the server's own HTTP path, from this
    /// run's numbers: the machine's cores divided by the target rate is every process's CPU per
    /// request; wrk, Redis's share for our job, the kernel's socket work for the server (the lower
    /// of ours and the peer's, which reads the same bodies on the same connections) and the
    /// receipt's own checks (the stage lines) come off it first. What is left is the most the
    /// server's user-space HTTP, task and allocation work could take at that rate; the last line
    /// sets it against what it takes now.
    static func rateBound(
        receiptq: [String: Any], peer: [String: Any], stepsMicros: Double, cores: Int
    ) -> (json: [String: Any], lines: [String]) {
        // A number the run could not measure is -1 in the JSON: missing, not the lowest.
        func value(_ json: [String: Any], _ key: String) -> Double {
            let number = (json[key] as? Double) ?? (json[key] as? Int).map(Double.init) ?? .nan
            return number >= 0 ? number : .nan
        }
        func lower(_ a: Double, _ b: Double) -> Double { a.isNaN ? b : b.isNaN ? a : Swift.min(a, b) }
        let peerRate = value(peer, "rps")
        let target = 1.2 * peerRate
        let budget = Double(cores) * 1_000_000 / target
        let wrk = lower(value(receiptq, "wrk_cpu_us_per_req"), value(peer, "wrk_cpu_us_per_req"))
        let redis = value(receiptq, "redis_cpu_us_per_req")
        let kernel = lower(value(receiptq, "server_sys_us_per_req"), value(peer, "server_sys_us_per_req"))
        let left = budget - wrk - redis - kernel - stepsMicros
        let serverUser = value(receiptq, "server_cpu_us_per_req") - value(receiptq, "server_sys_us_per_req")
        let httpNow = serverUser - stepsMicros
        let json: [String: Any] = [
            "target_rps": Format.json(target), "cpu_us_per_req_at_target": Format.json(budget), "wrk_us": Format.json(wrk),
            "redis_us": Format.json(redis), "server_kernel_us": Format.json(kernel), "receipt_steps_us": Format.json(stepsMicros),
            "left_for_server_http_us": Format.json(left), "server_http_now_us": Format.json(httpNow),
        ]
        let lines = [
            "what 1.2× the peer (\(Format.rate(target)) req/s) leaves the server's HTTP path, µs of CPU per request: "
                + "\(cores) cores ÷ the rate \(Format.micros(budget)) − wrk \(Format.micros(wrk)) − Redis \(Format.micros(redis)) "
                + "− the server's kernel time (the lower of ours and the peer's) \(Format.micros(kernel)) − the receipt's steps "
                + "\(Format.micros(stepsMicros)) = \(Format.micros(left))",
            "  against the server's user time beyond the steps now: \(Format.micros(httpNow)) µs (HTTP parse and answer, NIO, "
                + "tasks, auth, the Redis client, malloc)",
        ]
        return (json, lines)
    }
}
