import Foundation
import MockAppStore
import ReceiptCore

/// The receiptq deployment a run plays against, with its in-process mock App Store: what the
/// driver needs of it, so the same driver runs under the tests' `TestSystem` and the command's
/// own in-process system.
/// The webhook stream the customers' backend kept, as the README tells a backend to: each event
/// once, a repeat of an event id already received ignored.
public struct ReceivedEvents: Sendable, Equatable {
    /// The event types each app user received, in arrival order.
    public var byUser: [String: [EventType]]
    /// Deliveries of an event already received (a delivery is at least once: a worker killed
    /// between its POST and recording it sends it again, with the same `Receiptq-Event-Id`).
    public var repeats: Int

    /// The stream kept from `deliveries` (those the backend answered 2xx), in arrival order.
    public init(deliveries: [(eventID: String, user: String, type: EventType)]) {
        var seen = Set<String>()
        byUser = [:]
        repeats = 0
        for delivery in deliveries {
            guard seen.insert(delivery.eventID).inserted else {
                repeats += 1
                continue
            }
            byUser[delivery.user, default: []].append(delivery.type)
        }
    }
}

public protocol ConformanceTarget: Sendable {
    /// The mock App Store the deployment calls and is notified by (its clock is the run's).
    var mock: MockAppStoreState { get }
    /// The app's bundle id (its products are ``ConformanceCatalogue``'s).
    var bundleID: String { get }
    /// `POST /client/transactions` with a device's signed transaction; the HTTP status.
    func postTransaction(_ jws: String, user: String) async throws -> Int
    /// `GET /client/customers/{user}`'s answer.
    func customer(_ user: String) async throws -> JSONValue
    /// Returns once everything the deployment was told so far is processed: notifications
    /// delivered to it are stored, no re-poll is due at the simulated now and not yet queued, no
    /// job is queued or retrying, no webhook is pending.
    func settle() async throws
    /// The earliest re-poll the deployment has planned (its subscriptions' next poll; nil: none).
    func nextPollDue() async throws -> Date?
    /// When the deployment polls subscriptions again (its `REPOLL_*` settings).
    var repollPolicy: RepollPolicy { get }
    /// Returns once each user's backend received at least the number of events given (webhooks
    /// go out after their change commits), or every event the target made for a user (an event
    /// never made will not come), or once the target's patience ran out: then the comparison
    /// counts what is missing.
    func awaitEvents(_ counts: [String: Int]) async throws
    /// How often, in simulated time, the deployment's history sweep asks Apple for the
    /// notifications it missed: a lost notification is found within about this long.
    var historySweepInterval: TimeInterval { get }
    /// Which of the notifications `uuids` the deployment has stored (applied, in the same
    /// transaction as their changes).
    func stored(notifications uuids: Set<String>) async throws -> Set<String>
    /// Returns once every notification of `uuids` is stored, or once the target's patience ran
    /// out (then the answers the missing ones would change are counted wrong).
    func awaitStored(notifications uuids: Set<String>) async throws
    /// The event types each app user's backend received by webhook, in arrival order, by user:
    /// one pass over every delivery (per user, a 10,000-customer run's end spent its time
    /// filtering the whole stream once for each of 11,000 users).
    func receivedEvents() -> ReceivedEvents
    /// SIGKILLs the deployment's worker process (``Faults/workerKilled``) once it holds a job and
    /// starts another; returns the jobs the dead one held, which the janitor must give back
    /// (``settle()`` waits for that too). Nil when it held none within a short wait: not killed.
    func killWorker() async throws -> Int?
}
