import Dispatch
import Foundation
import HTTPTypes
import Hummingbird
import OpenSSL
import ReceiptCore
import Synchronization

/// The request context the admin surfaces need: Hummingbird's, with the peer's address (the
/// client address of the throttle, the security log and the audit log).
public typealias AdminRequestContext = RequestContext & RemoteAddressRequestContext

/// Someone logged in to the dashboard or the admin API, with the role they hold **now**.
public struct Operator: Sendable, Equatable {
    public var username: String
    public var role: OperatorRole
    /// The account's generation the credentials were checked against; 0 for the built-in admin of
    /// `DASHBOARD_USERNAME` / `DASHBOARD_PASSWORD`, which is not a stored account.
    var generation: Int
    /// The client address of the request this operator made (as ``TrustedProxies`` resolved it).
    var address: String?

    init(username: String, role: OperatorRole, generation: Int, address: String? = nil) {
        self.username = username
        self.role = role
        self.generation = generation
        self.address = address
    }

    /// What the audit log records for this operator's `action` from `source`.
    func audit(_ action: String, source: String, target: String? = nil, appID: UUID? = nil, users: [String] = []) -> AuditAction {
        AuditAction(
            actor: username, role: role, action: action, source: source, target: target, appID: appID, userIdentifiers: users,
            clientAddress: address)
    }
}

/// Who may use the admin surfaces: the built-in admin (the `DASHBOARD_*` variables, checked
/// first and without Postgres, so the dashboard works while Postgres is down) and the stored
/// operator accounts (`receiptq operators`, scrypt-hashed passwords).
///
/// scrypt costs ~0.1 s of CPU, so it runs off the event loop, failures are throttled (per client
/// address and per account, shared by every replica: ``AuthGate``), and a verified password is
/// remembered (as an HMAC under a per-process key, with the stored hash, so
/// a reset forgets it) for the admin API's HTTP Basic requests, which carry it every time.
public final class OperatorAuthenticator: Sendable {
    let builtIn: AdminCredentials
    let directory: (any OperatorDirectory)?
    private let verified: Mutex<Set<[UInt8]>>
    private let cacheKey = SecureRandom.bytes(32)
    private let gate: AuthGate
    private let proxies: TrustedProxies

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
    ///   - gate: the failure throttle and the security log.
    ///   - proxies: the reverse proxies whose forwarding header names the client.
    public init(builtIn: AdminCredentials, directory: (any OperatorDirectory)?, gate: AuthGate, proxies: TrustedProxies) {
        self.builtIn = builtIn
        self.directory = directory
        verified = Mutex([])
        self.gate = gate
        self.proxies = proxies
    }

    /// The client address of `request` (the peer, or what a trusted proxy says it forwarded).
    func address<Context: AdminRequestContext>(_ request: Request, _ context: Context) -> String? {
        let forwarded = proxies.header.flatMap { HTTPField.Name($0) }.map { request.headers[values: $0].joined(separator: ",") }
        return proxies.client(peer: context.remoteAddress?.ipAddress, forwarded: forwarded)
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

    /// Checks a username and password presented at `door` from `address`.
    public func authenticate(username: String, password: String, door: AuthDoor, address: String?, now: Date = Date()) async -> Outcome {
        let attempt = AuthAttempt(door: door, address: address, account: username)
        // Before any check, the built-in one included: while throttled, a right guess must not
        // be told apart from a wrong one, or the throttle would not bound guessing at all.
        if case .closed(let wait) = await gate.admit(attempt, now: now) { return .throttled(wait) }
        let outcome = await check(username: username, password: password, address: attempt.address)
        switch outcome {
        case .granted: gate.granted(attempt)
        case .refused(let reason):
            if case .closed(let wait) = await gate.refused(attempt, reason, now: now) {
                // This failure closed the address: said at once, so a script sees it stop.
                return .throttled(wait)
            }
            return .refused
        case .unavailable: return .unavailable
        }
        guard case .granted(var user) = outcome else { return .unavailable }
        user.address = attempt.address
        return .granted(user)
    }

    /// A check's result before the throttle and the log have seen it.
    private enum Check {
        case granted(Operator)
        case refused(AuthRefusal)
        case unavailable
    }

    private func check(username: String, password: String, address: String) async -> Check {
        if builtIn.verify(username: username, password: password) {
            return .granted(Operator(username: builtIn.username, role: .admin, generation: 0))
        }
        let name = username.lowercased()
        guard let directory, name != builtIn.username.lowercased(), name.utf8.count <= 64, password.utf8.count <= 1024 else {
            return .refused(name == builtIn.username.lowercased() ? .wrongSecret : .unknownCredential)
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
        guard let account else { return .refused(.unknownCredential) }
        guard matches else { return .refused(.wrongSecret) }
        verified.withLock { set in
            if set.count >= Self.cacheLimit { set.removeAll() }
            set.insert(key)
        }
        return .granted(Operator(username: account.username, role: account.role, generation: account.generation))
    }

    /// Checks an `Authorization: Basic …` header presented at `door` from `address`.
    public func authenticate(authorization header: String?, door: AuthDoor, address: String?, now: Date = Date()) async -> Outcome {
        guard let (username, password) = AdminCredentials.basic(header) else {
            // No credentials is not a guess (a client's first request, before the challenge);
            // an unreadable header is.
            if header != nil { await gate.refused(AuthAttempt(door: door, address: address), .malformed, now: now) }
            return .refused
        }
        return await authenticate(username: username, password: password, door: door, address: address, now: now)
    }

    /// Reports a request the operator's role does not allow (403): logged and counted, not
    /// throttled (the password was right).
    func forbidden(_ user: Operator, door: AuthDoor, now: Date) async {
        await gate.refused(AuthAttempt(door: door, address: user.address, account: user.username), .forbidden, now: now)
    }

    /// The operator a session was issued to, with their current role; refused when the account
    /// was removed, reset or given another role since (its generation moved on).
    func resume(_ session: AdminSessions.Session, address: String?) async -> Outcome {
        if session.generation == 0 {
            return session.username == builtIn.username
                ? .granted(Operator(username: builtIn.username, role: .admin, generation: 0, address: address)) : .refused
        }
        guard let directory else { return .refused }
        do {
            guard let account = try await directory.account(username: session.username), account.generation == session.generation else {
                return .refused
            }
            return .granted(Operator(username: account.username, role: account.role, generation: account.generation, address: address))
        } catch {
            return .unavailable
        }
    }
}
