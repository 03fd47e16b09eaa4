import Foundation

/// Why one record of a batch could not be stored, or a lookup could not be answered (bounded code;
/// never receipt data).
///
/// A *permanent* failure is the database refusing the value itself (a Postgres data exception,
/// SQLSTATE class 22, or a constraint violation, class 23): the same record fails the same way
/// forever, so a worker buries the job at once instead of asking Apple again, and a read answers
/// 422 or 404 instead of "retry later". Anything else (the connection) may pass.
public struct StoreFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed, in a closed set; a database's own verdict keeps its standard code.
    public enum Code: Sendable, Equatable, CustomStringConvertible {
        /// No connection to the database.
        case unavailable
        /// The write committed but its row could not be read back.
        case missingAfterWrite
        /// The database refused the statement: its SQLSTATE (`23503`, `22021`, …).
        case sqlState(String)
        /// The driver failed before the database gave a SQLSTATE (its failure's name).
        case driver(String)

        public var description: String {
            switch self {
            case .unavailable: "store_unavailable"
            case .missingAfterWrite: "missing_after_write"
            case .sqlState(let state): state
            case .driver(let name): name
            }
        }
    }

    /// What failed.
    public var code: Code
    /// A short description without receipt data or secrets.
    public var message: String
    /// True when retrying the same work cannot succeed.
    public var isPermanent: Bool

    /// Creates a failure.
    public init(code: Code, message: String, isPermanent: Bool = false) {
        self.code = code
        self.message = message
        self.isPermanent = isPermanent
    }

    public var description: String { "StoreFailure.\(code): \(message)" }
}
