import Foundation
import Libpq
import ReceiptCore

/// ``CustomerConsumptionLog`` (`customer_consumption`) and ``ConsumptionPolicies`` (`apps`) in
/// Postgres, on the API's pool.
public struct PostgresCustomerConsumption: CustomerConsumptionLog, ConsumptionPolicies {
    private let pool: PostgresConnectionPool

    /// Creates the log on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func record(_ statement: CustomerConsumption, appID: UUID, userIdentifier: String) async throws {
        try await pool.withConnection {
            try CustomerConsumptionRows.write(statement, appID: appID, userIdentifier: userIdentifier, on: $0)
        }
    }

    public func policy(appID: UUID) async throws -> ConsumptionPolicy? {
        try await pool.withConnection(.readOnly) { try AppAdmin(connection: $0).consumptionPolicy(appID: appID) }
    }

    public func setPolicy(_ policy: ConsumptionPolicy, appID: UUID, audit: AuditAction) async throws -> Bool {
        try await pool.withConnection { connection in
            try connection.transaction { connection in
                guard try AppAdmin(connection: connection).setConsumptionPolicy(appID: appID, policy: policy) else { return false }
                try AuditRows.begin(audit, outcome: "done", on: connection)
                return true
            }
        }
    }
}
