import Foundation

extension IngestRow {

    static func summarize(
        runs: [[String: Any]], settings: Settings, probe: (status: Int, body: String), receipt: (der: Int, body: Int, purchases: Int),
        redisHz: Int, receiptq: String, wrk: String, profile: [String: Any]?,
        peer: (version: String, processes: Int, runs: [[String: Any]])? = nil, stages: [Stage] = [],
        batch: (items: Int, runs: [[String: Any]])? = nil, replicated: (series: ReplicatedSeries, runs: [[String: Any]])? = nil
    ) -> [String: Any] {
        func values(_ key: String) -> [Double] { numbers(runs, key) }
        func med(_ key: String, places: Double = 10) -> Double { Format.json(median(values(key)), places: places) }
        let errors = runs.reduce(0) { $0 + (($1["errors"] as? Int) ?? 0) }
        var statuses: [String: Int] = [:]
        for run in runs {
            for (status, count) in run["statuses"] as? [String: Int] ?? [:] { statuses[status, default: 0] += count }
        }
        let rps = med("rps")
        let p99 = med("p99_ms", places: 1_000)
        let probeOK = (200..<300).contains(probe.status)
        // Beyond receipts × apps requests, a run repeats pairs: the API answers those from the first job.
        let pairs = settings.receipts * settings.apps
        let repeated = runs.contains { (($0["requests"] as? Int) ?? 0) > pairs }

        var result: [String: Any] = [
            "rps": rps, "p50_ms": med("p50_ms", places: 1_000), "p99_ms": p99, "p999_ms": med("p999_ms", places: 1_000),
            "errors": errors, "statuses": statuses, "all_2xx_queued": runs.allSatisfy { $0["all_2xx_queued"] as? Bool == true },
            "server_cpu_pct": med("server_cpu_pct"), "server_cpu_us_per_req": med("server_cpu_us_per_req"),
            "server_sys_us_per_req": med("server_sys_us_per_req"), "wrk_cpu_us_per_req": med("wrk_cpu_us_per_req"),
            "server_peak_rss_mb": values("server_peak_rss_mb").max() ?? -1, "redis_cpu_pct": med("redis_cpu_pct"),
            "redis_cpu_us_per_req": med("redis_cpu_us_per_req"), "postgres_cpu_pct": med("postgres_cpu_pct"),
            "wrk_cpu_pct": med("wrk_cpu_pct"), "machine_busy_pct": med("machine_busy_pct"),
            "runs": runs, "connections": settings.connections, "wrk_threads": settings.threads, "window_s": settings.seconds,
            "warmup_s": settings.warmup, "api_sync_wait_ms": settings.syncWaitMs, "receipt_der_bytes": receipt.der,
            "receipt_purchases": receipt.purchases,
            "distinct_receipts": settings.receipts, "apps": settings.apps, "pairs_per_run": pairs, "pairs_repeated": repeated,
            "body_bytes": receipt.body, "redis_hz": redisHz,
            "probe": ["status": probe.status, "body": probe.body], "receiptq": receiptq, "wrk": wrk,
            "targets": [
                "rps_ge_10000": ["value": rps, "met": rps >= 10_000],
                "p99_le_20ms": ["value": p99, "met": p99 <= 20],
            ],
            "method": [
                "rps, p50_ms, p99_ms": "median over the runs of wrk's requests/duration and exact histogram percentiles (µs → ms)",
                "errors": "responses that are not 2xx + socket errors and timeouts, all runs",
                "*_cpu_pct": "utime+stime over the run ÷ wall time, % of one core (the machine has 2)",
                "server": "receiptq serve, API_SYNC_WAIT_MS=\(settings.syncWaitMs), no worker: 206 once the job is in Redis",
            ],
        ]
        if let profile { result["profile"] = profile }
        let peerReport = peer.map { peerSummary($0, receiptq: runs) }
        if let peerReport {
            result["peer"] = peerReport.json
            var targets = result["targets"] as? [String: Any] ?? [:]
            targets["rps_ge_1.2x_python_peer"] = ["value": Format.json(peerReport.ratio, places: 100), "met": peerReport.ratio >= 1.2]
            result["targets"] = targets
        }
        var batchRatio: Double?
        if let batch {
            let items = batch.runs.map { ($0["items_per_s"] as? Double) ?? .nan }
            let ratio = median(items) / rps
            batchRatio = ratio
            let batchPairs = (settings.receipts + batch.items - 1) / batch.items * settings.apps
            result["batch"] = [
                "items_per_batch": batch.items, "runs": batch.runs, "items_per_s": Format.json(median(items)),
                "requests_per_s": Format.json(median(batch.runs.map { ($0["rps"] as? Double) ?? .nan })),
                "p99_ms": Format.json(median(batch.runs.map { ($0["p99_ms"] as? Double) ?? .nan }), places: 1_000),
                "ratio_items_to_single_rps": Format.json(ratio, places: 100),
                "all_items_queued": batch.runs.allSatisfy { $0["all_2xx_queued"] as? Bool == true },
                "pairs_repeated": batch.runs.contains { (($0["requests"] as? Int) ?? 0) > batchPairs },
            ]
            var targets = result["targets"] as? [String: Any] ?? [:]
            targets["batch_items_ge_3x_single"] = ["value": Format.json(ratio, places: 100), "met": ratio >= 3]
            result["targets"] = targets
        }
        let replicatedReport = replicated.map { $0.series.summary(single: runs, runs: $0.runs) }
        if let replicated, let replicatedReport { result[replicated.series.baseline == nil ? "replicas_ack" : "baseline"] = replicatedReport.json }
        let stageReport = stages.isEmpty ? nil : stageReport(stages, serverMicros: med("server_cpu_us_per_req"))
        if let stageReport { result["stages_us_per_req"] = stageReport.json }
        let bound = stageReport.flatMap { stageReport in
            peerReport.map {
                rateBound(
                    receiptq: result, peer: $0.json, stepsMicros: (stageReport.json["steps_sum"] as? Double) ?? .nan,
                    cores: ProcessInfo.processInfo.activeProcessorCount)
            }
        }
        if let bound { result["rate_bound_at_1.2x_peer"] = bound.json }

        var table = TextTable(
            title:
                "ingest: POST \(path), \(settings.receipts) receipts × \(settings.apps) apps, \(receipt.der) B each (\(receipt.purchases) purchases, \(receipt.body) B body), wrk \(settings.threads) threads × "
                + "\(settings.connections) connections, \(Format.json(settings.seconds)) s runs, API_SYNC_WAIT_MS=\(settings.syncWaitMs)",
            headers: [
                "run", "req/s", "p50 ms", "p99 ms", "max ms", "non-2xx", "sock err", "server CPU %", "µs/req", "RSS MB", "redis CPU %",
                "pg CPU %", "wrk CPU %", "machine busy %", "",
            ])
        func row(_ label: String, _ run: [String: Any]) -> [String] {
            func cell(_ key: String) -> String { Format.micros((run[key] as? Double) ?? (run[key] as? Int).map(Double.init) ?? .nan) }
            let socket = (run["socket_errors"] as? [String: Int])?.values.reduce(0, +)
            let flagged =
                ((run["errors"] as? Int) ?? 0) > 0 || run["all_2xx_queued"] as? Bool == false || ((run["requests"] as? Int) ?? 0) > pairs
            return [
                label, Format.rate((run["rps"] as? Double) ?? .nan), cell("p50_ms"), cell("p99_ms"), cell("max_ms"),
                (run["non_2xx"] as? Int).map(String.init) ?? "-",
                socket.map(String.init) ?? "-", cell("server_cpu_pct"), cell("server_cpu_us_per_req"), cell("server_peak_rss_mb"),
                cell("redis_cpu_pct"), cell("postgres_cpu_pct"), cell("wrk_cpu_pct"), cell("machine_busy_pct"),
                flagged ? "ERRORS" : "",
            ]
        }
        func medianRow(_ label: String, _ summary: [String: Any], _ runs: [[String: Any]]) -> [String] {
            var cells = row(label, summary)
            cells[5] = "\(runs.reduce(0) { $0 + (($1["non_2xx"] as? Int) ?? 0) })"
            cells[6] = "\(runs.reduce(0) { $0 + (($1["socket_errors"] as? [String: Int])?.values.reduce(0, +) ?? 0) })"
            cells[4] = "-"
            return cells
        }
        for (index, run) in runs.enumerated() { table.add(row("run \(index + 1)", run)) }
        table.add(medianRow("median", result, runs))
        if let peer, let peerReport {
            for (index, run) in peer.runs.enumerated() { table.add(row("peer \(index + 1)", run)) }
            table.add(medianRow("peer median", peerReport.json, peer.runs))
        }
        table.notes.append("statuses (all runs): " + statuses.sorted { $0.key < $1.key }.map { "\($0.key) × \($0.value)" }.joined(separator: ", "))
        if let last = runs.last {
            let commands = (last["redis_commands_per_req"] as? [String: Any] ?? [:]).filter { $0.key != "info" }
                .sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            table.notes.append(
                "per request (last run): Redis \(commands), \(last["redis_net_in_bytes_per_req"] ?? "?") B in, "
                    + "\(last["redis_cpu_us_per_req"] ?? "?") µs Redis CPU; server \(last["server_context_switches_per_req"] ?? "?") "
                    + "context switches, \(last["server_threads"] ?? "?") threads")
        }
        // The API waits for a worker's result with BLPOP (≥ 10 ms) even at API_SYNC_WAIT_MS=0, and Redis
        // ends a short blocking timeout only after about one cron period (1000/hz ms): that bounds latency.
        let blpop = ((runs.last?["redis_commands_per_req"] as? [String: Any])?["blpop"] as? Double) ?? 0
        if blpop >= 0.5 {
            table.notes.append(
                "every POST waited in BLPOP for a worker's result (\(blpop) per request, API_SYNC_WAIT_MS=\(settings.syncWaitMs)); "
                    + "at Redis hz \(redisHz) such a short timeout fires only after ~\(redisHz > 0 ? 1_000 / redisHz : -1) ms")
        }
        table.notes.append(
            "first POST answered \(probe.status)" + (probeOK ? "" : ": \(probe.body)")
                + "; CPU % = utime+stime ÷ wall, of one core; non-2xx and sock err on the median line are totals")
        if runs.contains(where: { $0["all_2xx_queued"] as? Bool == false }) {
            table.notes.append("ERRORS: fewer jobs in the Redis queue than 2xx answers in a run")
        }
        if repeated {
            table.notes.append("ERRORS: a run sent more than \(pairs) requests, so some (receipt, app) pairs twice: raise --receipts or --apps")
        }
        table.notes.append(
            "targets: ≥ 10000 req/s \(rps >= 10_000 ? "met" : "not met") (\(Format.rate(rps))), "
                + "p99 ≤ 20 ms \(p99 <= 20 ? "met" : "not met") (\(Format.micros(p99)))"
                + (errors > 0 ? "; \(errors) errors: the run does not count" : ""))
        if let peer, let peerReport {
            table.notes.append(
                "peer: bench/peer/ingest_endpoint.py (\(peer.version)), \(peer.processes) processes on one port; its \"server\" columns "
                    + "are the sum of its processes; it checks the token and the JSON fields and LPUSHes a job, nothing else")
            table.notes.append(
                "receiptq ÷ peer, req/s: \(Format.json(peerReport.ratio, places: 100))× (median of the medians; run by run "
                    + "\(peerReport.paired.map { "\(Format.json($0, places: 100))×" }.joined(separator: ", ")), runs alternating); "
                    + "target ≥ 1.2×: \(peerReport.ratio >= 1.2 ? "met" : "not met")")
        }
        if let batch, let batchRatio {
            for (index, run) in batch.runs.enumerated() { table.add(row("batch \(index + 1)", run)) }
            let items = batch.runs.map { Format.rate(($0["items_per_s"] as? Double) ?? .nan) }.joined(separator: " · ")
            table.notes.append(
                "batch rows: POST …/batch of \(batch.items) receipts (a JSON array) into the import queue; req/s × \(batch.items) = "
                    + "items/s \(items); median ÷ the single POST's req/s: \(Format.json(batchRatio, places: 100))× (target ≥ 3×: "
                    + "\(batchRatio >= 3 ? "met" : "not met"))"
                    + (batch.runs.allSatisfy { $0["all_2xx_queued"] as? Bool == true }
                        ? "" : "; ERRORS: fewer import jobs queued than items answered"))
        }
        if let replicated, let replicatedReport {
            for (index, run) in replicated.runs.enumerated() { table.add(row("\(replicated.series.label) \(index + 1)", run)) }
            table.notes.append(replicatedReport.note)
        }
        table.notes += stageReport?.lines ?? []
        table.notes += bound?.lines ?? []
        print(table.render())
        if let profile {
            for note in PerfProfile.notes(profile, title: "receiptq serve and Redis under load") { print(note) }
        }
        return result
    }

    /// The peer's runs summed up like receiptq's, and the ratios of the same run.
    static func peerSummary(
        _ peer: (version: String, processes: Int, runs: [[String: Any]]), receiptq runs: [[String: Any]]
    ) -> (json: [String: Any], ratio: Double, paired: [Double]) {
        let values = numbers
        func med(_ key: String, places: Double = 10) -> Double { Format.json(median(values(peer.runs, key)), places: places) }
        let ours = median(values(runs, "rps"))
        let theirs = median(values(peer.runs, "rps"))
        let paired = zip(values(runs, "rps"), values(peer.runs, "rps")).map { $0 / $1 }
        let json: [String: Any] = [
            "version": peer.version, "processes": peer.processes, "runs": peer.runs, "rps": med("rps"),
            "p50_ms": med("p50_ms", places: 1_000), "p99_ms": med("p99_ms", places: 1_000),
            "errors": peer.runs.reduce(0) { $0 + (($1["errors"] as? Int) ?? 0) },
            "all_2xx_queued": peer.runs.allSatisfy { $0["all_2xx_queued"] as? Bool == true },
            "server_cpu_pct": med("server_cpu_pct"), "server_cpu_us_per_req": med("server_cpu_us_per_req"),
            "server_sys_us_per_req": med("server_sys_us_per_req"), "wrk_cpu_us_per_req": med("wrk_cpu_us_per_req"),
            "server_peak_rss_mb": values(peer.runs, "server_peak_rss_mb").max() ?? -1, "redis_cpu_pct": med("redis_cpu_pct"),
            "redis_cpu_us_per_req": med("redis_cpu_us_per_req"), "postgres_cpu_pct": med("postgres_cpu_pct"),
            "wrk_cpu_pct": med("wrk_cpu_pct"), "machine_busy_pct": med("machine_busy_pct"),
            "ratio_rps": Format.json(ours / theirs, places: 100), "ratio_rps_per_run": paired.map { Format.json($0, places: 100) },
        ]
        return (json, ours / theirs, paired)
    }

    /// One number of every run (NaN where a run lacks it), for medians and ratios.
    static func numbers(_ runs: [[String: Any]], _ key: String) -> [Double] {
        runs.map { ($0[key] as? Double) ?? ($0[key] as? Int).map(Double.init) ?? .nan }
    }
}
