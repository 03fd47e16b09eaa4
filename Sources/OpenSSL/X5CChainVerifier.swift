public import struct Foundation.Date

/// Chains given as a JWS `x5c` header (leaf first, then the certificates that issued it) against
/// fixed trust anchors, with the same certificate and chain caches as receipts: a chain seen
/// before costs hash lookups, not certificate decoding and path building.
///
/// Nothing in `x5c` is trusted by being there: the chain must end at one of `trustedRoots`.
public final class X5CChainVerifier: Sendable {
    private let judge: CachedChainJudge
    private let certificates: CertificateCache

    /// A verifier for these anchors (no purpose checked: the caller checks Apple's marker OIDs).
    public init(trustedRoots: [Certificate], intermediates: [Certificate] = [], cache: PKCS7VerificationCache = .shared) {
        judge = CachedChainJudge(trustedRoots: trustedRoots, intermediates: intermediates, purpose: nil, chains: cache.chains)
        certificates = cache.certificates
    }

    /// Decodes `x5c` (each entry once, then from the cache) and judges the chain at `time`.
    /// - Returns: the decoded certificates (leaf first), or why not: an entry is not a certificate
    ///   (``ChainFailure/malformedCertificate``), or the chain does not reach a trusted root then.
    public func verify(x5c: [[UInt8]], at time: Date?) -> Result<[Certificate], ChainFailure> {
        defer { OpenSSLError.drainQueue() }
        var decoded: [(key: SHA256Key, certificate: Certificate)] = []
        for der in x5c {
            guard !der.isEmpty, let entry = der.withUnsafeBufferPointer({ certificates.certificate(der: $0) }) else {
                return .failure(.malformedCertificate)
            }
            decoded.append(entry)
        }
        guard let leaf = decoded.first else { return .failure(.malformedCertificate) }
        let embedded = decoded.dropFirst()
        let reason = judge.failure(
            leaf.certificate, key: leaf.key, untrusted: embedded.map(\.certificate) + judge.intermediates,
            embeddedKeys: embedded.map(\.key), at: time)
        if let reason { return .failure(.untrusted(reason: reason)) }
        certificates.promote(decoded.map(\.key))
        return .success(decoded.map(\.certificate))
    }

    /// Why a chain failed.
    public enum ChainFailure: Error, Sendable, Equatable {
        /// An entry is not a DER certificate (or there is none).
        case malformedCertificate
        /// The certificates decode but do not lead to a trusted root at the time; `reason` is the
        /// judge's bounded verdict (`untrusted_chain`, `certificate_expired`, …), for logs.
        case untrusted(reason: String)
    }
}
