import Dispatch
import Foundation
import OpenSSL
import ReceiptCore
import Synchronization

/// Someone logged in to the dashboard or the admin API, with the role they hold **now**.
public struct Operator: Sendable, Equatable {
    public var username: String
    public var role: OperatorRole
    /// The account's generation the credentials were checked against; 0 for the built-in admin of
    /// `DASHBOARD_USERNAME` / `DASHBOARD_PASSWORD`, which is not a stored account.
    var generation: Int

    /// What the audit log records for this operator's `action` from `source`.
    func audit(_ action: String, source: String, target: String? = nil, appID: UUID? = nil, users: [String] = []) -> AuditAction {
        AuditAction(
            actor: username, role: role, action: action, source: source, target: target, appID: appID, userIdentifiers: users)
    }
}

/// Who may use the admin surfaces: the built-in admin (the `DASHBOARD_*` variables, checked
/// first and without Postgres, so the dashboard works while Postgres is down) and the stored
/// operator accounts (`receiptq operators`, scrypt-hashed passwords).
///
/// scrypt costs ~0.1 s of CPU, so it runs off the event loop, failures are throttled, and a
/// verified password is remembered (as an HMAC under a per-process key, with the stored hash, so
/// a reset forgets it) for the admin API's HTTP Basic requests, which carry it every time.
public final class OperatorAuthenticator: Sendable {
    let builtIn: AdminCredentials
    let directory: (any OperatorDirectory)?
    private let verified: Mutex<Set<[UInt8]>>
    private let cacheKey = SecureRandom.bytes(32)
    private let throttle: LoginThrottle

    /// One scrypt at a time, on a thread of its own: 32 MiB and ~0.1 s each, so a burst of logins
    /// queues rather than taking every core and the global pool's threads.
    static let hashing = DispatchQueue(label: "receiptq.dashboard.scrypt")
    /// A hash to verify when the account does not exist, so the answer's timing does not say so
    /// (made on first use, on ``hashing``: a process that never sees a wrong name never pays for it).
    static let decoy = PasswordHash.hash(Digest.hex(SecureRandom.bytes(16)))

    /// The most verified passwords remembered (the set is cleared when full).
    static let cacheLimit = 1024

    /// Creates the authenticator.
    /// - Parameters:
    ///   - builtIn: the built-in admin (`DASHBOARD_USERNAME`, `DASHBOARD_PASSWORD`).
    ///   - directory: the stored accounts (nil: the built-in admin only).
    ///   - now: the clock of the failure throttle.
    public init(builtIn: AdminCredentials, directory: (any OperatorDirectory)?, now: Date = Date()) {
        self.builtIn = builtIn
        self.directory = directory
        verified = Mutex([])
        throttle = LoginThrottle(now: now)
    }

    /// An authentication's outcome.
    public enum Outcome: Sendable, Equatable {
        case granted(Operator)
        case refused
        /// Too many failures: try again in this many seconds.
        case throttled(Int)
        /// The accounts cannot be read (Postgres down): not the caller's mistake.
        case unavailable
    }

    /// Checks a username and password.
    public func authenticate(username: String, password: String, now: Date = Date()) async -> Outcome {
        // Before any check, the built-in one included: while throttled, a right guess must not
        // be told apart from a wrong one, or the throttle would not bound guessing at all.
        if let wait = throttle.retryAfter(now: now) { return .throttled(wait) }
        if builtIn.verify(username: username, password: password) {
            return .granted(Operator(username: builtIn.username, role: .admin, generation: 0))
        }
        let name = username.lowercased()
        guard let directory, name != builtIn.username.lowercased(), name.utf8.count <= 64, password.utf8.count <= 1024 else {
            throttle.failed(now: now)
            return .refused
        }
        let account: OperatorAccount?
        do {
            account = try await directory.account(username: name)
        } catch {
            return .unavailable
        }
        let key = Digest.hmacSHA256(key: cacheKey, Array("\(name)\u{0}\(password)\u{0}\(account?.passwordHash ?? "")".utf8))
        if let account, verified.withLock({ $0.contains(key) }) {
            return .granted(Operator(username: account.username, role: account.role, generation: account.generation))
        }
        let stored = account?.passwordHash
        let matches = await withCheckedContinuation { continuation in
            Self.hashing.async { continuation.resume(returning: PasswordHash.verify(password, against: stored ?? Self.decoy)) }
        }
        guard let account, matches else {
            throttle.failed(now: now)
            return .refused
        }
        verified.withLock { set in
            if set.count >= Self.cacheLimit { set.removeAll() }
            set.insert(key)
        }
        return .granted(Operator(username: account.username, role: account.role, generation: account.generation))
    }

    /// Checks an `Authorization: Basic …` header.
    public func authenticate(authorization header: String?, now: Date = Date()) async -> Outcome {
        guard let (username, password) = AdminCredentials.basic(header) else { return .refused }
        return await authenticate(username: username, password: password, now: now)
    }

    /// The operator a session was issued to, with their current role; refused when the account
    /// was removed, reset or given another role since (its generation moved on).
    func resume(_ session: AdminSessions.Session) async -> Outcome {
        if session.generation == 0 {
            return session.username == builtIn.username ? .granted(Operator(username: builtIn.username, role: .admin, generation: 0)) : .refused
        }
        guard let directory else { return .refused }
        do {
            guard let account = try await directory.account(username: session.username), account.generation == session.generation else {
                return .refused
            }
            return .granted(Operator(username: account.username, role: account.role, generation: account.generation))
        } catch {
            return .unavailable
        }
    }
}
