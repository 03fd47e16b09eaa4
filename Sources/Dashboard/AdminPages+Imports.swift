import Foundation
import ReceiptCore

extension AdminPages {
    /// The overview's imports table: each import active in the last day, with what its batches
    /// queued, what the workers stored or buried, the rate and when it should be done.
    static func importValues(_ runs: [ImportRun], apps: [AppRecord], now: Date) -> [String: Any] {
        let names = Dictionary(apps.map { ($0.id, $0.name) }, uniquingKeysWith: { first, _ in first })
        let rows = runs.map { run -> [String: Any] in
            let settled = run.stored + run.failed
            let percent = run.queued > 0 ? min(100, settled * 100 / run.queued) : 100
            let state: String
            if run.isRunning {
                state = run.estimatedEnd(now: now).map { "done \(relative($0, now: now))" } ?? "starting"
            } else {
                state = "finished \(relative(run.lastStoredAt ?? run.updatedAt, now: now))"
            }
            return [
                "id": run.id.canonical, "shortID": String(run.id.canonical.suffix(12)),
                "app": run.appID.map { names[$0] ?? String($0.canonical.prefix(8)) } ?? "—",
                "startedUTC": utc(run.startedAt), "startedAgo": relative(run.startedAt, now: now), "queued": run.queued,
                "stored": run.stored, "failed": run.failed, "failedAlarm": run.failed > 0, "duplicates": run.duplicates,
                "invalid": run.invalid, "percent": percent,
                "rate": run.ratePerSecond.map { String(format: "%.1f/s", $0) } ?? "—", "state": state, "running": run.isRunning,
            ]
        }
        return ["hasImports": !rows.isEmpty, "importList": rows]
    }
}
