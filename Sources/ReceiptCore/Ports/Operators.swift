import Foundation

/// What an operator of the dashboard and the admin API may do. Each role can do what the one
/// before it can: a viewer looks, an operator also retries and deletes jobs, an admin also manages
/// webhooks and apps.
public enum OperatorRole: String, Sendable, CaseIterable, Comparable {
    case viewer, `operator`, admin

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rank < rhs.rank }

    private var rank: Int {
        switch self {
        case .viewer: 0
        case .operator: 1
        case .admin: 2
        }
    }
}

/// A stored operator account (`receiptq operators`).
public struct OperatorAccount: Sendable, Equatable {
    /// Lower case; compared case-insensitively.
    public var username: String
    public var role: OperatorRole
    /// The password's scrypt hash (PHC string); never the password.
    public var passwordHash: String
    /// Bumped by every reset and role change: sessions issued for an older generation end.
    public var generation: Int
    public var createdAt: Date

    /// Creates an account.
    public init(username: String, role: OperatorRole, passwordHash: String, generation: Int, createdAt: Date) {
        self.username = username
        self.role = role
        self.passwordHash = passwordHash
        self.generation = generation
        self.createdAt = createdAt
    }
}

/// Where operator accounts are looked up (Postgres). The built-in admin of `DASHBOARD_USERNAME`
/// is not stored here.
public protocol OperatorDirectory: Sendable {
    /// The account named `username` (any case), if there is one.
    func account(username: String) async throws -> OperatorAccount?
}

/// One line of the audit log: who did what, when, from where, to how many jobs.
public struct AuditEntry: Sendable, Equatable {
    public var id: Int64
    public var at: Date
    public var actor: String
    public var role: String?
    /// A bounded code: `dead.retry`, `retries.delete`, `webhook.pause`, `operator.add`, `customer.lookup`, …
    public var action: String
    /// `dashboard`, `api` or `cli`.
    public var source: String
    /// What the action acted on (ids, a filter, an endpoint); never a secret.
    public var target: String?
    public var appID: UUID?
    public var userIdentifiers: [String]
    public var jobCount: Int?
    /// `started` (recorded before the action ran; it did not report back), `done`, `failed`, or
    /// `refused` (a role too low for it: the attempt, not run).
    public var outcome: String
    /// The client address the request came from (nil: the command line, or before it was kept).
    public var clientAddress: String?

    /// Creates an entry.
    public init(
        id: Int64, at: Date, actor: String, role: String?, action: String, source: String, target: String?, appID: UUID?,
        userIdentifiers: [String], jobCount: Int?, outcome: String, clientAddress: String? = nil
    ) {
        self.clientAddress = clientAddress
        self.id = id
        self.at = at
        self.actor = actor
        self.role = role
        self.action = action
        self.source = source
        self.target = target
        self.appID = appID
        self.userIdentifiers = userIdentifiers
        self.jobCount = jobCount
        self.outcome = outcome
    }
}

/// An action about to be taken, for the audit log.
public struct AuditAction: Sendable, Equatable {
    public var actor: String
    public var role: OperatorRole?
    public var action: String
    public var source: String
    public var target: String?
    public var appID: UUID?
    public var userIdentifiers: [String]
    /// The client address the request came from (nil: the command line, or unknown).
    public var clientAddress: String?

    /// Creates an action.
    public init(
        actor: String, role: OperatorRole?, action: String, source: String, target: String? = nil, appID: UUID? = nil,
        userIdentifiers: [String] = [], clientAddress: String? = nil
    ) {
        self.clientAddress = clientAddress
        self.actor = actor
        self.role = role
        self.action = action
        self.source = source
        self.target = target
        self.appID = appID
        self.userIdentifiers = userIdentifiers
    }

    /// This action, acting on `target`.
    public func with(target: String?) -> AuditAction {
        var copy = self
        copy.target = target
        return copy
    }
}

/// Which audit entries a page shows.
public struct AuditFilter: Sendable, Equatable {
    public var actor: String?
    /// An action or a family (`dead.` matches `dead.retry` and `dead.delete`).
    public var action: String?
    public var userIdentifier: String?

    /// Creates a filter.
    public init(actor: String? = nil, action: String? = nil, userIdentifier: String? = nil) {
        self.actor = actor
        self.action = action
        self.userIdentifier = userIdentifier
    }
}

/// The audit log (Postgres). An action is recorded **before** it runs and settled after, so an
/// action that ran always has its line — if the line cannot be written, the action is not taken.
public protocol AuditLog: Sendable {
    /// Records `action` as started; returns its id for ``settle(_:jobCount:failed:)``.
    func begin(_ action: AuditAction) async throws -> Int64
    /// Records `action` as refused: an operator whose role does not allow it tried it.
    func refused(_ action: AuditAction) async throws
    /// Marks entry `id` done (with the jobs it moved) or failed.
    func settle(_ id: Int64, jobCount: Int?, failed: Bool) async throws
    /// The newest entries matching `filter`, older than entry `before` when given.
    func entries(_ filter: AuditFilter, before: Int64?, limit: Int) async throws -> [AuditEntry]
}
