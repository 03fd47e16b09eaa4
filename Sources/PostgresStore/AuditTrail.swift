import Foundation
import Libpq
import ReceiptCore

/// The audit log of the command line's changes that have no transaction of their own to share
/// (`receiptq apps …`): the line is written before the change (no line, no change), then settled
/// `done` or `failed`, as the admin surfaces' actions are.
public struct AuditTrail {
    private let connection: PostgresConnection

    /// Creates the trail on `connection`.
    public init(connection: PostgresConnection) { self.connection = connection }

    /// Runs `body` after writing `action`'s line; settles the line with its outcome.
    /// - Throws: the database's error when the line cannot be written (nothing was done), or what
    ///   `body` throws.
    public func run<T>(_ action: AuditAction, _ body: () throws -> T) throws -> T {
        let id = try AuditRows.begin(action, on: connection)
        do {
            let result = try body()
            settle(id, failed: false)
            return result
        } catch {
            settle(id, failed: true)
            throw error
        }
    }

    /// Best effort: the line already says the change started, which is what must not be lost.
    private func settle(_ id: Int64, failed: Bool) {
        try? AuditRows.settle(id, jobCount: nil, failed: failed, on: connection)
    }
}
