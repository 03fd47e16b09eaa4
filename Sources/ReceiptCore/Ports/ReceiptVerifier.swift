import Foundation

/// Calls Apple (or the mock) for one receipt, following the environment rules. Asynchronous so that
/// thousands of calls can be in flight on one thread. Never fails: transport failures are part of
/// the report.
public protocol ReceiptVerifier: Sendable {
    /// Validates one receipt and calls `completion` exactly once, on any thread. `completion` must
    /// return quickly (it may run on the HTTP engine's only thread).
    func verify(_ request: ValidationRequest, completion: @escaping @Sendable (ValidationOutcome) -> Void)
}

extension ReceiptVerifier {
    /// Validates one receipt, suspending until the report arrives.
    public func verify(_ request: ValidationRequest) async -> ValidationOutcome {
        await withCheckedContinuation { continuation in
            verify(request) { continuation.resume(returning: $0) }
        }
    }
}
