/// Checks that Apple signed a compact JWS (a StoreKit 2 transaction, a renewal info, a Server API
/// answer's JWS or a notification): the 402 of the transactions endpoint, and the trust in every
/// Server API answer.
public protocol SignedPayloadVerifier: Sendable {
    /// The verified JWS, or why it is not Apple's.
    func verify(_ compact: String) -> Result<VerifiedJWS, JWSFailure>
}
