import Foundation

extension PipelineRow {
    /// The peer (`peer_sidekiq`: the same work as a plain Sidekiq job) at the concurrencies of the
    /// single-process levels, run right after them on the same machine and mock latency, so the
    /// ratios are of one run, not of two sessions. Nil when no level qualifies; a peer that cannot
    /// run (Sidekiq missing) is reported in the JSON and the table, not fatal.
    static func comparePeer(
        levels: [Level], result: [String: Any], receiptq: URL, latencyMs: Int, warmup: Double, seconds: Double
    ) -> (table: TextTable, json: [String: Any])? {
        let compared = levels.filter { $0.processes == 1 && !$0.serverAPI }
        guard !compared.isEmpty else { return nil }
        var table = TextTable(
            title: "pipeline vs peer_sidekiq (the same receipts, mock and Postgres; peer run right after the levels, one Sidekiq process per core)",
            headers: ["level", "receiptq rps", "peer rps", "ratio", "receiptq pg µs/job", "peer pg µs/job", "peer sidekiq µs/job"])
        var json: [String: Any] = [:]
        do {
            let peer = try PeerSidekiqRow.Peer(
                receiptq: receiptq, latencyMs: latencyMs, warmup: warmup, seconds: seconds, redisDB: 3, processes: PeerSidekiqRow.defaultProcesses)
            defer { peer.close() }
            json["sidekiq"] = peer.version
            json["processes"] = peer.processes
            var peerLevels: [String: Any] = [:]
            var ours: [Double] = []
            var theirs: [Double] = []
            for level in compared {
                guard let entry = result[level.key] as? [String: Any], let rps = entry["rps"] as? Double else { continue }
                let measured = try peer.measure(concurrency: level.concurrency)
                var detail = measured.json
                detail["ratio"] = Format.json(rps / measured.rps, places: 100)
                peerLevels[level.key] = detail
                ours.append(rps)
                theirs.append(measured.rps)
                // With several runs the level's CPU breakdown is its median run's.
                let run = (entry["median_run"] as? [String: Any]) ?? entry
                let pg = ((run["cpu_us_per_job_by_process"] as? [String: Any])?["postgres"] as? Double).map(Format.micros) ?? "-"
                table.add([
                    level.key, Format.rate(rps), Format.rate(measured.rps), String(format: "%.2f×", rps / measured.rps), pg,
                    Format.micros(measured.postgresMicros), Format.micros(measured.sidekiqMicros),
                ])
            }
            json["levels"] = peerLevels
            if let c100 = (peerLevels["c100"] as? [String: Any])?["ratio"] as? Double {
                json["c100_ratio"] = c100
                table.notes.append("c100: \(String(format: "%.2f", c100))× the peer (target ≥ 1.4×: \(c100 >= 1.4 ? "met" : "not met"))")
            }
            if let ourPeak = ours.max(), let theirPeak = theirs.max() {
                json["peak_ratio"] = Format.json(ourPeak / theirPeak, places: 100)
                table.notes.append(
                    "peaks: \(Format.rate(ourPeak)) vs \(Format.rate(theirPeak))/s = \(String(format: "%.2f", ourPeak / theirPeak))× "
                        + "(target ≥ 2×: \(ourPeak / theirPeak >= 2 ? "met" : "not met"))")
            }
        } catch {
            json["error"] = "\(error)"
            table.notes.append("the peer did not run: \(error)")
        }
        return (table, json)
    }
}
