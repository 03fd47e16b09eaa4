import Foundation
import OpenSSL
import ReceiptCore

/// Checks that Apple signed a compact JWS, as Apple's `SignedDataVerifier` does, on the OpenSSL
/// façade: `alg` ES256; the `x5c` chain from its leaf to one of the configured roots (Apple Root
/// CA - G3 in production; the mock's root in development), judged at the payload's `signedDate`
/// (a notification of the 2022 format, which has none, at its nested transaction's: ``JWSSigningDate``);
/// Apple's marker extensions on the leaf (`1.2.840.113635.100.6.11.1`) and the intermediate
/// (`1.2.840.113635.100.6.2.1`); then the ES256 signature with the leaf's key.
///
/// Chains are cached (decoded certificates and time-free verdicts, shared with the receipt
/// verifier), so a transaction signed by a known chain costs one ECDSA verification.
/// Thread-safe; never crashes on any input.
public final class JWSVerifier: SignedPayloadVerifier {
    /// Apple's marker on the certificate that signs App Store JWS.
    public static let leafMarker = "1.2.840.113635.100.6.11.1"
    /// Apple's marker on the WWDR intermediate that issues it.
    public static let intermediateMarker = "1.2.840.113635.100.6.2.1"

    private let chains: X5CChainVerifier
    private let time: VerificationTime
    private let revocation: OCSPRevocationChecker?

    /// A verifier trusting `trustStore`'s roots (and its intermediates as helpers).
    /// - Parameters:
    ///   - time: when certificates are judged: at the payload's `signedDate` by default
    ///     (``VerificationTime/receiptDate``), `now`, or a given instant.
    ///   - revocation: the OCSP check of the chain's leaf and intermediate, after the signature
    ///     (nil: none; a forgery never costs a query).
    public init(trustStore: TrustStore, time: VerificationTime = .receiptDate, revocation: OCSPRevocationChecker? = nil) {
        self.chains = X5CChainVerifier(trustedRoots: trustStore.roots, intermediates: trustStore.intermediates)
        self.time = time
        self.revocation = revocation
    }

    public func verify(_ compact: String) -> Result<VerifiedJWS, JWSFailure> {
        let jws: CompactJWS
        do {
            jws = try CompactJWS(compact)
        } catch {
            return .failure(error)
        }
        guard let payload = try? JSONValue.parse(jws.payload), payload.objectValue != nil else {
            return .failure(.malformedPayload)
        }
        let signedDate = JWSSigningDate(of: payload)?.date
        let at: Date? =
            switch time {
            case .receiptDate: signedDate ?? Date()
            case .now: nil
            case .at(let date): date
            }
        let certificates: [Certificate]
        switch chains.verify(x5c: jws.x5c, at: at) {
        case .success(let chain): certificates = chain
        case .failure(.malformedCertificate): return .failure(.malformedCertificateChain)
        case .failure(.untrusted): return .failure(.untrustedChain)
        }
        guard certificates.count >= 2, certificates[0].hasExtension(oid: Self.leafMarker),
            certificates[1].hasExtension(oid: Self.intermediateMarker)
        else { return .failure(.missingAppleMarker) }
        guard let key = try? certificates[0].publicKey, ES256.verify(signature: jws.signature, of: jws.signingInput, key: key) else {
            return .failure(.invalidSignature)
        }
        if let revocation, let failure = revocation.failure(for: certificates) { return .failure(failure) }
        return .success(
            VerifiedJWS(
                header: jws.header, payload: payload, chainSubjects: certificates.map { $0.subjectCommonName ?? "" }, signedDate: signedDate))
    }
}
