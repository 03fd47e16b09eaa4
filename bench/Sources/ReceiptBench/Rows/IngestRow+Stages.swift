import Foundation
import IngestAPI
import NIOCore
import ReceiptCore
import ReceiptSignature

extension IngestRow {
    /// One step of `POST /client/itunes_connect/receipts` as the server takes it.
    struct Stage {
        var name: String
        /// What the server calls for it.
        var call: String
        /// Mean CPU µs per request, this thread's clock.
        var micros: Double
    }

    /// The server's own steps for one POST, each timed in this process on the run's bodies, one
    /// request after another (`samples` requests over the bodies in turn, after `samples / 10`
    /// untimed): the input check, the JSON parse, the fields (base64 and DER decode included), the
    /// local checks and the job, the bytes of the Redis command, and the answer. What the server
    /// spends beyond their sum is HTTP (NIO, Hummingbird, the socket), the token look-up, the Redis
    /// client and the thread hand-offs. Timed alone, with warm caches and no other thread, each step
    /// is at its cheapest: the remainder is an upper bound.
    static func stages(bodies: [String], app: AppRecord, verifier: ReceiptSignatureVerifier, samples: Int) throws -> [Stage] {
        let buffers = bodies.map { ByteBuffer(string: $0) }
        let names = [
            ("input check", "InputHygiene.jsonProblem"), ("JSON parse", "IngestAPI.parseJSONBody"),
            ("fields, base64, DER decode", "SubmitReceiptRequest.parse"), ("signature check, job", "ReceiptIngestion.plan"),
            ("Redis command bytes", "JobEnvelope.encoded + pending ReceiptResource.encoded"),
            ("answer body", "ReceiptResource.encoded(sandboxPolicy:)"),
            // Parts of the two above, timed on their own for the note.
            ("  of which base64 decode", "ReceiptDecoder.base64Bytes"), ("  of which DER decode", "ReceiptDecoder.decode(bytes:)"),
            ("  of which signature", "ReceiptSignatureVerifier.verify"),
        ]
        var totals = [UInt64](repeating: 0, count: names.count)
        let warmup = max(10, samples / 10)
        for index in 0..<(warmup + samples) {
            var times = [UInt64](repeating: 0, count: names.count)
            var clock = BenchClock.threadCPU()
            func lap(_ stage: Int) {
                let now = BenchClock.threadCPU()
                times[stage] = now - clock
                clock = now
            }
            let buffer = buffers[index % buffers.count]
            blackHole(InputHygiene.jsonProblem(buffer.readableBytesView))
            lap(0)
            guard let json = IngestAPI.parseJSONBody(buffer) else { throw BenchFailure(description: "stages: a body is not JSON") }
            lap(1)
            guard case .success(let request) = SubmitReceiptRequest.parse(json) else {
                throw BenchFailure(description: "stages: a body is refused by SubmitReceiptRequest.parse")
            }
            lap(2)
            let job = ReceiptIngestion.plan(
                request.receipt, submission: request.submission, app: app, origin: .api, authenticity: verifier, at: Date())
            guard job.envelope.payload.purchase?.fraudReason == nil else { throw BenchFailure(description: "stages: a receipt is refused as fraud") }
            lap(3)
            blackHole((job.envelope.encoded(), job.pending.encoded()))
            lap(4)
            blackHole(job.pending.encoded(sandboxPolicy: app.sandboxPolicy))
            lap(5)
            guard case .string(let text)? = json["receipt"] else { throw BenchFailure(description: "stages: no receipt") }
            let bytes = try ReceiptDecoder.base64Bytes(text)
            lap(6)
            let receipt = try ReceiptDecoder.decode(bytes: bytes)
            lap(7)
            blackHole(verifier.verify(bytes: bytes, receipt: receipt))
            lap(8)
            if index >= warmup { for stage in times.indices { totals[stage] += times[stage] } }
        }
        return names.enumerated().map { index, name in
            Stage(name: name.0, call: name.1, micros: Double(totals[index]) / Double(samples) / 1_000)
        }
    }

    /// The stages as JSON and as the lines under the table, against the server's µs per request.
    static func stageReport(_ stages: [Stage], serverMicros: Double) -> (json: [String: Any], lines: [String]) {
        let steps = stages.filter { !$0.name.hasPrefix(" ") }
        let sum = steps.reduce(0) { $0 + $1.micros }
        var json: [String: Any] = [:]
        var lines = ["server CPU per request by stage (µs; each step timed alone in the bench process, the rest is what the server spent beyond):"]
        for stage in stages {
            json[stage.name.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: " ", with: "_").replacingOccurrences(of: ",", with: "")] =
                Format.json(stage.micros)
            lines.append(
                "  \(stage.name.padding(toLength: 28, withPad: " ", startingAt: 0)) \(Format.micros(stage.micros).leftPadded(8))  \(stage.call)")
        }
        let rest = serverMicros - sum
        json["steps_sum"] = Format.json(sum)
        json["rest_http_auth_redis_io"] = Format.json(rest)
        lines.append("  \("steps above".padding(toLength: 28, withPad: " ", startingAt: 0)) \(Format.micros(sum).leftPadded(8))")
        lines.append(
            "  \("rest: HTTP, auth, Redis I/O".padding(toLength: 28, withPad: " ", startingAt: 0)) \(Format.micros(rest).leftPadded(8))  "
                + "of \(Format.micros(serverMicros)) µs per request measured in the server (median of the runs)")
        return (json, lines)
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
}
