import AppStoreClient
import Curl
import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptWorker
import RedisJobQueue
import Synchronization

/// The pipeline row's stage profile: the same lanes as `receiptq work` (``ReceiptQueueApp``'s
/// `makeWorkerPool` wiring: RedisWorkQueue, PostgresReceiptStore, AppStoreClient and
/// RedisOutageCircuit under the real `WorkerPool`), built in the bench process so that each port
/// can be wrapped in a timer (``PipelineStages``). Plus single-thread timings of the JSON each job
/// encodes and decodes, on a real envelope, App Store answer and result.
enum PipelineProfile {
    static func run(concurrency: Int, context: PipelineRow.Context) throws -> [String: Any] {
        guard let template = context.receipt else { throw PipelineRow.Failure(description: "no receipt template") }
        let app = try context.makeApp("profile-c\(concurrency)")
        let factory = try JobFactory(receipt: template, appID: app.id)
        let prefix = "{rqb-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, context.redis) }
        var configuration = context.configuration
        configuration.keys = keys
        configuration.appStore.productionURL = "\(context.mockBase)/verifyReceipt"
        configuration.appStore.sandboxURL = "\(context.mockBase)/sandbox/verifyReceipt"
        let lanes = configuration

        let recorders = StageRecorders()
        var logger = Logger(label: "bench.profile")
        logger.logLevel = .warning
        let pool = WorkerPool(
            configuration: .init(
                concurrency: concurrency, reserveTimeout: .milliseconds(500), shutdownTimeout: .seconds(10),
                heartbeatInterval: .seconds(10), retryPolicy: configuration.retryPolicy),
            makeLane: { index in
                let recorder = recorders.make()
                let redis = try RedisConnection(configuration: lanes.redis, label: "profile-\(index)")
                let postgres = try PostgresConnection(configuration: lanes.postgres, label: "profile-\(index)")
                let queue = RedisWorkQueue(connection: redis, keys: lanes.keys, workerID: "bench\(prefix)-\(index)")
                return WorkerLane(
                    queue: TimedQueue(queue, recorder: recorder, recorders: recorders),
                    store: TimedStore(PostgresReceiptStore(connection: postgres), recorder: recorder),
                    verifier: TimedVerifier(try AppStoreClient(configuration: lanes.appStore), recorder: recorder),
                    circuit: TimedCircuit(RedisOutageCircuit(connection: redis, keys: lanes.keys), recorder: recorder))
            }, logger: logger)
        let task = Task { try await pool.run() }

        let readyBy = Date().addingTimeInterval(30)
        while Date() < readyBy, (try context.redis.send(["SCARD", keys.workers]).int ?? 0) < concurrency { usleep(100_000) }

        let feederRedis = try RedisConnection(configuration: context.configuration.redis, label: "bench-profile-feeder")
        defer { feederRedis.close() }
        let ideal = Double(concurrency) * context.idealPerLane
        let feeder = Feeder(
            redis: feederRedis, keys: keys, factory: factory, firstSerial: context.serial,
            settings: .init(backlog: max(4, Int(ideal * 0.004)), maxBatch: 500, pollMicros: 1_000))
        feeder.start()
        let warmup = min(context.warmup, 3)
        let seconds = min(context.seconds, 8)
        pause(seconds: warmup)
        recorders.generation.add(1, ordering: .relaxed)
        let cpu0 = ProcessStats.selfCPUMicros()
        let wall0 = Date()
        let processed0 = pool.processedCount
        pause(seconds: seconds)
        let cpu1 = ProcessStats.selfCPUMicros()
        let wall1 = Date()
        let processedInWindow = Double(max(pool.processedCount - processed0, 1))
        context.serial = feeder.stop()
        pool.stop()
        try blockingAwait { try await task.value }

        // Merge the lanes' timings.
        var merged: [PipelineStage: StageRecorder.Timing] = [:]
        var sampleResult: [UInt8]?
        for recorder in recorders.recorders {
            for (stage, timing) in recorder.timings {
                merged[stage, default: .init()].calls += timing.calls
                merged[stage, default: .init()].cpu &+= timing.cpu
                merged[stage, default: .init()].wall += timing.wall
            }
            sampleResult = sampleResult ?? recorder.sampleResult
        }
        let jobs = Double(max(merged[.job]?.calls ?? 0, 1))
        var stages: [String: Any] = [:]
        var attributed = 0.0
        for stage in PipelineStage.allCases {
            guard let timing = merged[stage] else { continue }
            let wall = Distribution(nanoseconds: timing.wall)
            let cpu = Double(timing.cpu) / 1_000 / jobs
            if stage != .job && stage != .reserve { attributed += cpu }
            stages[stage.rawValue] = [
                "calls_per_job": Format.json(Double(timing.calls) / jobs, places: 1_000),
                "cpu_us_per_job": Format.json(cpu),
                "wall_ms_p50": Format.json(wall.p50 / 1_000, places: 1_000),
                "wall_ms_p99": Format.json(wall.p99 / 1_000, places: 1_000),
                "wall_ms_mean": Format.json(wall.mean / 1_000, places: 1_000),
            ]
        }
        let jobCPU = Double(merged[.job]?.cpu ?? 0) / 1_000 / jobs
        let reserveCPU = Double(merged[.reserve]?.cpu ?? 0) / 1_000 / jobs
        let processCPU = (cpu1 - cpu0) / processedInWindow
        var result: [String: Any] = [
            "concurrency": concurrency,
            "window_s": seconds,
            "jobs": Int(jobs),
            "rps": Format.json(processedInWindow / wall1.timeIntervalSince(wall0)),
            "lane_cpu_us_per_job": Format.json(reserveCPU + jobCPU),
            "glue_cpu_us_per_job": Format.json(jobCPU - attributed),
            "bench_process_cpu_us_per_job": Format.json(processCPU),
            "stages": stages,
            "note":
                "in-process lanes (the bench's process) with the worker's adapters; thread CPU per stage; glue = JobProcessor's own work "
                + "(ValidationRecord, purchases from Apple's JSON, result JSON encode, logging). bench_process includes the feeder.",
        ]
        result["json_us"] = try jsonTimings(context: context, factory: factory, sampleResult: sampleResult)
        return result
    }

    /// Single-thread CPU of the JSON work of one job, on real bytes: the envelope (reserve), the
    /// App Store request and answer (verify), the purchases read from the answer, the result (ack).
    static func jsonTimings(context: PipelineRow.Context, factory: JobFactory, sampleResult: [UInt8]?) throws -> [String: Any] {
        let envelopeBytes = factory.makeJob(serial: 7).bytes
        let envelope = try JobEnvelope.decode(envelopeBytes)
        func requestBody() -> [UInt8] {
            // AppStoreClient.requestBody, as written there.
            let object: [String: JSONValue] = [
                "receipt-data": .string(envelope.receipt), "exclude-old-transactions": .bool(false),
                "password": .string(PipelineRow.Context.sharedSecret),
            ]
            return (try? JSONEncoder().encode(JSONValue.object(object))).map { [UInt8]($0) } ?? []
        }
        let answer = try CurlEasy(options: CurlOptions()).perform(
            HTTPRequest(
                method: "POST", url: "\(context.mockBase)/verifyReceipt", headers: [(name: "Content-Type", value: "application/json")],
                body: requestBody()))
        guard let response = VerifyReceiptResponse(body: answer.body) else {
            throw PipelineRow.Failure(description: "the mock's answer is not JSON (HTTP \(answer.status))")
        }
        let resource = try sampleResult.map(ReceiptResource.decode)
        var cases: [(String, () -> Void)] = [
            ("envelope_decode", { blackHole(try? JobEnvelope.decode(envelopeBytes)) }),
            ("request_encode", { blackHole(requestBody()) }),
            ("response_decode", { blackHole(VerifyReceiptResponse(body: answer.body)) }),
            ("purchases_from_json", { blackHole(response.transactions.compactMap(InAppPurchase.init(appleJSON:))) }),
        ]
        if let resource { cases.append(("result_encode", { blackHole(resource.encoded()) })) }
        let samples = Sampler.measureRoundRobin(cases.map(\.1), warmup: 200, iterations: 2_000) { $0() }
        var result: [String: Any] = [
            "envelope_bytes": envelopeBytes.count, "response_bytes": answer.body.count, "result_bytes": sampleResult?.count ?? 0,
        ]
        var total = 0.0
        for ((name, _), sample) in zip(cases, samples) {
            let p50 = Distribution(nanoseconds: sample.cpu).p50
            total += p50
            result[name] = Format.json(p50)
        }
        result["total"] = Format.json(total)
        return result
    }

    static func render(_ profile: [String: Any], concurrency: Int) -> String {
        var table = TextTable(
            title:
                "\npipeline profile at c\(concurrency): per-stage timers, in-process lanes (\(profile["jobs"] ?? "?") jobs, "
                + "\(profile["rps"] ?? "?") jobs/s)",
            headers: ["stage", "calls/job", "CPU µs/job", "wall p50 ms", "wall p99 ms", "wall mean ms"])
        let stages = profile["stages"] as? [String: [String: Double]] ?? [:]
        for stage in PipelineStage.allCases {
            guard let entry = stages[stage.rawValue] else { continue }
            table.add([
                stage.rawValue, String(format: "%.2f", entry["calls_per_job"] ?? .nan), Format.micros(entry["cpu_us_per_job"] ?? .nan),
                String(format: "%.2f", entry["wall_ms_p50"] ?? .nan), String(format: "%.2f", entry["wall_ms_p99"] ?? .nan),
                String(format: "%.2f", entry["wall_ms_mean"] ?? .nan),
            ])
        }
        table.notes.append(
            "lane CPU/job \(profile["lane_cpu_us_per_job"] ?? "?") µs (reserve + job); glue (JobProcessor itself) "
                + "\(profile["glue_cpu_us_per_job"] ?? "?") µs; the whole bench process \(profile["bench_process_cpu_us_per_job"] ?? "?") µs/job")
        if let json = profile["json_us"] as? [String: Any] {
            let parts = ["envelope_decode", "request_encode", "response_decode", "purchases_from_json", "result_encode", "total"]
            table.notes.append(
                "JSON CPU µs per job (p50, one thread): " + parts.map { "\($0) \(json[$0] ?? "-")" }.joined(separator: ", ")
                    + " (envelope \(json["envelope_bytes"] ?? "?") B, answer \(json["response_bytes"] ?? "?") B, result \(json["result_bytes"] ?? "?") B)"
            )
        }
        if let perf = profile["perf"] as? [String: Any] {
            table.notes += PerfProfile.notes(perf, title: "worker + Postgres + Redis + mock after the c\(concurrency) window")
        }
        return table.render()
    }
}
