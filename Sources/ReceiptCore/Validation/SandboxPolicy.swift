/// What an app does with sandbox purchases reaching its production deployment.
///
/// App Review buys in the sandbox against the production build, so `accept` is the default: an
/// app that rejects them is rejected by App Review (APPSTORE-REFERENCE pitfall 1).
public enum SandboxPolicy: String, Sendable, Codable, CaseIterable {
    /// Validated like production purchases (App Review, TestFlight).
    case accept
    /// Validated, and marked `sandbox` in the resource and the entitlement answer.
    case flag
    /// Stored `invalid` with error code `sandbox_rejected`: never entitles.
    case reject

    /// Whether a result in `environment` is marked `sandbox_flagged` under this policy.
    public func flags(environment: String?) -> Bool { self == .flag && environment == "sandbox" }
}
