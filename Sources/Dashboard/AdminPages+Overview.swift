import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore

extension AdminPages {
    /// `GET /admin`: queues, retries, dead letters, workers, the circuit, Redis's replicas, imports
    /// and the last hour's chart.
    func overviewPage(_ user: Operator, _ session: AdminSessions.Session) async throws -> Response {
        let snapshot = try await overview.snapshot()
        let at = now()
        var values = base(user, session, counts: (snapshot.dead, snapshot.retries))
        values["overviewCurrent"] = true
        values["asOf"] = Self.utc(at)
        values["queueValidate"] = snapshot.queued[.validate, default: 0]
        values["queueRepoll"] = snapshot.queued[.repoll, default: 0]
        values["queueNotification"] = snapshot.queued[.notification, default: 0]
        values["queueWebhook"] = snapshot.queued[.webhook, default: 0]
        values["queueImport"] = snapshot.importQueued
        let known = snapshot.imports.isEmpty ? [] : ((try? await apps()) ?? [])
        values.merge(Self.importValues(snapshot.imports, apps: known, now: at)) { _, new in new }
        // Postgres being down must not take the overview (a Redis page) with it.
        if let webhooks, let paused = try? await webhooks.endpoints(appID: nil).filter({ $0.pausedAt != nil }), !paused.isEmpty {
            values["pausedEndpoints"] =
                paused.count == 1
                ? "A webhook endpoint (\(paused[0].url)) is paused: its events wait until it is resumed."
                : "\(paused.count) webhook endpoints are paused: their events wait until they are resumed."
        }
        if notifications != nil {
            values["hasNotificationLog"] = true
            let counts = await notificationCounts(since: at.addingTimeInterval(-86_400))
            values["hasNotificationCounts"] = !counts.isEmpty
            values["notificationCounts"] = counts
        }
        values["retries"] = snapshot.retries
        values["dead"] = snapshot.dead
        values["deadAlarm"] = snapshot.dead > 0
        values["workerCount"] = snapshot.workers.count
        values["processing"] = snapshot.workers.reduce(0) { $0 + $1.processing }
        values["hasWorkers"] = !snapshot.workers.isEmpty
        values["workerList"] = snapshot.workers.map { worker -> [String: Any] in
            [
                "id": worker.id, "host": worker.host ?? "?", "pid": worker.pid.map(String.init) ?? "?",
                "busy": worker.busy.map(String.init) ?? "?", "processing": worker.processing,
                "startedUTC": Self.utc(worker.startedAt), "startedAgo": Self.relative(worker.startedAt, now: at),
                "beatUTC": Self.utc(worker.lastHeartbeatAt), "beatAgo": Self.relative(worker.lastHeartbeatAt, now: at),
            ]
        }
        let circuit = snapshot.circuit
        values["circuitState"] = circuit.status.name
        switch circuit.status {
        case .closed:
            values["circuitLabel"] = "closed"
            values["circuitDetail"] = "Apple is answering"
        case .open(let until):
            values["circuitLabel"] = "open"
            values["circuitDetail"] = "outage mode until \(Self.utc(until)) UTC (\(circuit.failedProbes) failed probes)"
        case .halfOpen:
            values["circuitLabel"] = "half open"
            values["circuitDetail"] = "one probe decides"
        }
        values["verifyReceiptBanner"] = Self.verifyReceiptBanner(snapshot.verifyReceipt, now: at)
        values["chart"] = ActivityChart.svg(snapshot.activity)
        values["legend"] = ActivityChart.legend(snapshot.activity)
        values["deferred"] = snapshot.activity.reduce(0) { $0 + $1.tally.outcomes[.deferred, default: 0] }
        values.merge(Self.replicationValues(snapshot.replication)) { _, new in new }
        return html(.ok, "overview", values)
    }

    /// The Redis card: the primary's replicas online and the worst one's lag; none is no alarm
    /// (a single Redis is a valid deployment), a lag over 5 s is (a failover now would lose it).
    static func replicationValues(_ status: ReplicationStatus) -> [String: Any] {
        guard status.replicas > 0 else {
            return ["redisReplicas": "none", "redisReplicasDetail": "a single Redis: a failover has nothing to promote", "redisLagAlarm": false]
        }
        let lag = status.lagBytes > 0 ? "\(status.lagSeconds) s, \(status.lagBytes) bytes behind" : "\(status.lagSeconds) s behind"
        return ["redisReplicas": String(status.replicas), "redisReplicasDetail": "online, the worst \(lag)", "redisLagAlarm": status.lagSeconds > 5]
    }
}
