import Foundation
import Hiredis
import ReceiptCore

/// The scheduler's Redis side for re-polls: a token bucket shared by every scheduler replica (so a
/// backlog after downtime reaches Apple at the configured rate, however many replicas run), and
/// an enqueue that takes each poll once.
///
/// Not thread-safe: the scheduler's thread owns it.
public final class RedisRepollQueue: RepollQueue {
    private let connection: RedisConnection
    private let keys: RedisKeys
    private let ratePerSecond: Double
    private let burst: Int
    private let markerTTL: Duration
    private let replication: ReplicaAcknowledgement?

    /// Creates the queue on the scheduler's own connection.
    /// - Parameters:
    ///   - ratePerSecond: re-polls per second across every replica (`REPOLL_RATE_PER_SECOND`).
    ///   - burst: the most re-polls taken at once after an idle spell (default: one second's worth).
    ///   - markerTTL: how long a queued poll is remembered; longer than a scheduler's transaction can take.
    ///   - replication: replicas that must hold each enqueue before its subscriptions advance (a
    ///     lost job would otherwise wait out the claim's lease).
    public init(
        connection: RedisConnection, keys: RedisKeys, ratePerSecond: Double, burst: Int? = nil, markerTTL: Duration = .seconds(86_400),
        replication: ReplicaAcknowledgement? = nil
    ) {
        self.connection = connection
        self.keys = keys
        self.ratePerSecond = max(0, ratePerSecond)
        self.burst = max(1, burst ?? Int(ratePerSecond.rounded(.up)))
        self.markerTTL = markerTTL
        self.replication = replication
    }

    public func acquire(_ wanted: Int, now: Date) throws -> Int {
        guard wanted > 0 else { return 0 }
        let arguments = [String(milliseconds(now)), String(ratePerSecond), String(burst), String(wanted)]
        return try RedisScriptRunner.run(RedisScripts.repollBudget, keys: [keys.repollBudget], arguments: arguments.map(bytes), on: connection)
            .int ?? 0
    }

    public func enqueue(_ jobs: [JobEnvelope]) throws -> Int {
        let targeted = jobs.compactMap { job -> (JobEnvelope, RepollJob)? in
            guard case .repoll(let repoll) = job.payload else { return nil }
            return (job, repoll)
        }
        guard !targeted.isEmpty else { return 0 }
        let markers = targeted.map { job, repoll in
            keys.repollMarker(
                app: job.appID.uuidString.lowercased(), environment: repoll.environment ?? "",
                originalTransactionID: repoll.target.originalTransactionID, pollSequence: repoll.target.pollSequence)
        }
        let arguments = [bytes(String(Int(markerTTL.seconds)))] + targeted.map { job, _ in job.encoded() }
        let queued =
            try RedisScriptRunner.run(
                RedisScripts.repollEnqueue, keys: [keys.queue(JobKind.repoll.rawValue)] + markers, arguments: arguments, on: connection
            ).int ?? 0
        try replication?.confirm(on: connection)
        return queued
    }
}
