import Foundation
import Logging
import ReceiptCore

/// Runs the admin surfaces' actions so that each has its audit line **before** it runs: if the
/// line cannot be written, the action is not taken (the operator sees a 503 and can try again).
/// The line is settled afterwards with how many jobs moved, or as failed.
struct AuditedActions: Sendable {
    /// Nil only where there is no Postgres (unit tests of the pages): actions go unrecorded.
    let log: (any AuditLog)?

    /// The audit log could not be written: nothing was done.
    struct Unavailable: Error {}

    /// Runs `body` after writing `action`'s line; `jobCount` reads the jobs it moved from its result.
    func run<T: Sendable>(
        _ action: AuditAction, jobCount: @Sendable (T) -> Int? = { _ in nil }, _ body: () async throws -> T
    ) async throws -> T {
        guard let log else { return try await body() }
        let id: Int64
        do {
            id = try await log.begin(action)
        } catch {
            throw Unavailable()
        }
        do {
            let result = try await body()
            // Best effort: the line already says the action started, which is what must not be lost.
            try? await log.settle(id, jobCount: jobCount(result), failed: false)
            return result
        } catch {
            try? await log.settle(id, jobCount: nil, failed: true)
            throw error
        }
    }

    /// Records a request `user`'s role does not allow (`access.denied`, outcome `refused`, the
    /// request as its target). Best effort: the request is refused whether or not the line is written.
    func denied(_ user: Operator, _ request: String, source: String, logger: Logger) async {
        guard let log else { return }
        do {
            try await log.refused(user.audit("access.denied", source: source, target: request))
        } catch {
            logger.warning("A refused admin request could not be written to the audit log", error: error)
        }
    }

    /// Retries or deletes `selection` in `store` for `user`, audited as `dead.retry`,
    /// `retries.delete`, …; returns how many jobs moved.
    func apply(
        _ selection: Selection, to store: any JobSetStore, retry: Bool, by user: Operator, source: String, logger: Logger
    ) async throws -> Int {
        let family = store.kind == .dead ? "dead" : "retries"
        let users = try await selection.userIdentifiers(in: store)
        let action = user.audit(
            "\(family).\(retry ? "retry" : "delete")", source: source, target: selection.summary, appID: selection.appID, users: users)
        return try await run(action, jobCount: { $0 }, { try await selection.apply(to: store, retry: retry, logger: logger) })
    }
}

extension Selection {
    /// The most ids whose customers are looked up for the audit line (one Redis read each).
    static let auditedUserLookups = 100

    /// What the audit line says the action acted on: the ids (the first few), or the filter.
    var summary: String {
        switch self {
        case .ids(let ids):
            let shown = ids.prefix(5).map(\.rawValue).joined(separator: ", ")
            return ids.count > 5 ? "\(ids.count) jobs: \(shown), …" : "\(ids.count) job\(ids.count == 1 ? "" : "s"): \(shown)"
        case .all(let filter):
            let parts = [
                filter.errorCode.map { "error_code=\($0)" }, filter.appID.map { "app_id=\($0.canonical)" }, filter.search.map { "q=\($0)" },
            ].compactMap { $0 }
            return parts.isEmpty ? "every job" : "every job matching " + parts.joined(separator: " ")
        }
    }

    /// The app a filter names.
    var appID: UUID? {
        if case .all(let filter) = self { return filter.appID }
        return nil
    }

    /// The customers of the selected jobs (of the first ``auditedUserLookups`` ids), so the
    /// customer view can show what was done to their jobs.
    func userIdentifiers(in store: any JobSetStore) async throws -> [String] {
        guard case .ids(let ids) = self else { return [] }
        var users: [String] = []
        for id in ids.prefix(Self.auditedUserLookups) {
            if let user = try await store.entry(id: id)?.userIdentifier, !user.isEmpty, !users.contains(user) { users.append(user) }
        }
        return users
    }
}
