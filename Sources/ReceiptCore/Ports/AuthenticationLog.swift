import Foundation

/// Where every authentication decision is reported: the security log (refusals and throttling at
/// `notice`, with door, client address and account, never the secret) and a counter per door and
/// outcome.
public protocol AuthenticationLog: Sendable {
    /// Reports what `attempt` came to.
    func record(_ attempt: AuthAttempt, outcome: AuthOutcome)
    /// Reports that the shared throttle could not be reached (the process's own took over).
    func throttleUnavailable(_ error: any Error)
}
