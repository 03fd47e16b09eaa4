internal import COpenSSL
import Foundation
import Synchronization

public import struct Foundation.Date

/// ``PKCS7/verify(der:trustedRoots:intermediates:at:checkPurpose:)`` for many receipts against one
/// fixed set of trust anchors: the same results, at a fraction of the cost.
///
/// The reference path decodes every embedded certificate on every call (OpenSSL 3.0 spends
/// ≈ 1 M instructions per certificate decoding its public key) and builds the chain from scratch.
/// This verifier instead:
/// 1. finds the certificates in the BER (``PKCS7Layout``) and takes them from a process-wide cache
///    keyed by the SHA-256 of their DER (decoding them once);
/// 2. lets OpenSSL decode the SignedData without them (`d2i_PKCS7` on ``PKCS7Layout/stripped``),
///    adds the cached certificates back (`PKCS7_add_certificate`), and runs the very checks of the
///    reference path on it: signer lookup, digest and signature (`PKCS7_verify`);
/// 3. judges the chain from a cached time-free verdict and its validity window when the
///    verification time falls inside it, and with the full `X509_verify_cert` otherwise.
///
/// Whenever the signature does not verify, or the input has a shape step 1 does not expect, the
/// reference path runs instead and its result is returned, so a failure reads exactly as before.
public final class PKCS7Verifier: Sendable {
    /// The trust anchors.
    public let trustedRoots: [Certificate]
    /// Untrusted intermediates offered to signer lookup and chain building, after the embedded ones.
    public let intermediates: [Certificate]
    /// Whether the `smime_sign` purpose is checked (see ``PKCS7/verify(der:trustedRoots:intermediates:at:checkPurpose:)``).
    public let checkPurpose: Bool

    private let judge: CachedChainJudge
    private let certificates: CertificateCache
    private let fastPathCount = Atomic<Int>(0)
    private let referencePathCount = Atomic<Int>(0)

    /// How many verifications took which path.
    public struct Statistics: Sendable, Equatable {
        /// Decided on cached certificates.
        public var fastPath: Int
        /// Handed to the reference path (unexpected shape, or a signature that did not verify).
        public var referencePath: Int

        /// Creates statistics (to add up those of several verifiers).
        public init(fastPath: Int, referencePath: Int) {
            self.fastPath = fastPath
            self.referencePath = referencePath
        }
    }

    /// Counts since this verifier was made.
    public var statistics: Statistics {
        Statistics(fastPath: fastPathCount.load(ordering: .relaxed), referencePath: referencePathCount.load(ordering: .relaxed))
    }

    /// A verifier for these anchors, keeping its work in `cache` (by default the process-wide one).
    public init(
        trustedRoots: [Certificate], intermediates: [Certificate] = [], checkPurpose: Bool = true,
        cache: PKCS7VerificationCache = .shared
    ) {
        self.trustedRoots = trustedRoots
        self.intermediates = intermediates
        self.checkPurpose = checkPurpose
        certificates = cache.certificates
        judge = CachedChainJudge(
            trustedRoots: trustedRoots, intermediates: intermediates, purpose: checkPurpose ? "smime_sign" : nil, chains: cache.chains)
    }

    /// Verifies signature + chain at `time` (now when nil); the same result as
    /// ``PKCS7/verify(der:trustedRoots:intermediates:at:checkPurpose:)`` with this verifier's anchors.
    public func verify(der: [UInt8], at time: Date?) -> PKCS7.Verification {
        defer { OpenSSLError.drainQueue() }
        if let result = fastVerify(der, at: time) {
            fastPathCount.add(1, ordering: .relaxed)
            return result
        }
        referencePathCount.add(1, ordering: .relaxed)
        return PKCS7.verify(der: der, trustedRoots: trustedRoots, intermediates: intermediates, at: time, checkPurpose: checkPurpose)
    }

    /// The result when the signature verified on the cached certificates; nil hands over to the reference path.
    private func fastVerify(_ der: [UInt8], at time: Date?) -> PKCS7.Verification? {
        der.withUnsafeBufferPointer { buffer -> PKCS7.Verification? in
            guard let layout = PKCS7Layout(buffer) else { return nil }
            var embedded: [Certificate] = []
            var embeddedKeys: [SHA256Key] = []
            for range in layout.certificates {
                guard let (key, certificate) = certificates.certificate(der: UnsafeBufferPointer(rebasing: buffer[range])) else {
                    return nil
                }
                embedded.append(certificate)
                embeddedKeys.append(key)
            }
            let decoded = layout.stripped.withUnsafeBufferPointer { stripped -> UnsafeMutablePointer<COpenSSL.PKCS7>? in
                var cursor = stripped.baseAddress.map { UnsafePointer($0) }
                return d2i_PKCS7(nil, &cursor, stripped.count)
            }
            guard let p7 = decoded else { return nil }
            defer { PKCS7_free(p7) }
            // Only a signed, certificate-free SignedData: had a second `[0]` followed the one removed,
            // OpenSSL would now read it as the certificates, where the original does not parse.
            guard copenssl_pkcs7_type_is_signed(p7) == 1, copenssl_pkcs7_signed_certificates(p7) == nil else { return nil }
            // The same certificate objects, in the same order, as d2i_PKCS7 of the original would hold.
            for certificate in embedded where PKCS7_add_certificate(p7, certificate.x509) != 1 {
                return nil
            }
            OpenSSLError.drainQueue()

            var chainKeys: [SHA256Key] = []
            let result = PKCS7.verify(p7, intermediates: intermediates) { signer, untrusted in
                // The signer is a new wrapper around one of these certificates: compare the X509s.
                let signerKey =
                    embedded.firstIndex { $0.x509 == signer.x509 }.map { embeddedKeys[$0] } ?? judge.intermediateKey(of: signer)
                let failure = judge.failure(signer, key: signerKey, untrusted: untrusted, embeddedKeys: embeddedKeys, at: time)
                if failure == nil, let signerKey { chainKeys = [signerKey] + embeddedKeys }
                return failure
            }
            // No content: the signature did not verify, or the structure is off; the reference path
            // says exactly why (its error queue is its own).
            guard result.content != nil else { return nil }
            if result.valid { certificates.promote(chainKeys) }
            return withExtendedLifetime(embedded) { result }
        }
    }
}

/// ``ChainVerifier/verify(_:intermediates:trustedRoots:at:)`` for many leaves against fixed
/// anchors, as iOS 6 transaction receipts need: the leaf decoded once and the chain judged from a
/// cached time-free verdict, with the same results.
public final class CachedChainVerifier: Sendable {
    /// A leaf certificate taken from the cache.
    public struct Leaf: Sendable {
        public let certificate: Certificate
        let key: SHA256Key
    }

    private let judge: CachedChainJudge
    private let certificates: CertificateCache

    /// A verifier for these anchors (no purpose checked, like ``ChainVerifier``).
    public init(intermediates: [Certificate], trustedRoots: [Certificate], cache: PKCS7VerificationCache = .shared) {
        judge = CachedChainJudge(trustedRoots: trustedRoots, intermediates: intermediates, purpose: nil, chains: cache.chains)
        certificates = cache.certificates
    }

    /// The certificate whose DER is exactly `der`, decoded once; nil exactly when
    /// ``Certificate/init(der:)`` throws.
    public func leaf(der: [UInt8]) -> Leaf? {
        guard !der.isEmpty,
            let (key, certificate) = der.withUnsafeBufferPointer({ certificates.certificate(der: $0) })
        else { return nil }
        return Leaf(certificate: certificate, key: key)
    }

    /// Whether `leaf` chains to a trusted root at `time` (now when nil); the same answer as
    /// ``ChainVerifier/verify(_:intermediates:trustedRoots:at:)``.
    public func verify(_ leaf: Leaf, at time: Date?) -> (valid: Bool, reason: String?) {
        defer { OpenSSLError.drainQueue() }
        let reason = judge.failure(leaf.certificate, key: leaf.key, untrusted: judge.intermediates, embeddedKeys: [], at: time)
        if reason == nil { certificates.promote([leaf.key]) }
        return (reason == nil, reason)
    }
}

/// Judges chains for fixed anchors and purpose with the time-free verdicts of a
/// ``ChainVerdictCache``, falling back to the full `X509_verify_cert` when they cannot decide.
struct CachedChainJudge: Sendable {
    let trustedRoots: [Certificate]
    let intermediates: [Certificate]
    let purpose: String?
    private let intermediateKeys: [SHA256Key]
    /// SHA-256 over the roots' and intermediates' digests and the purpose: the part of every chain
    /// cache key that these anchors fix.
    private let trustKey: SHA256Key
    private let chains: ChainVerdictCache

    init(trustedRoots: [Certificate], intermediates: [Certificate], purpose: String?, chains: ChainVerdictCache) {
        self.trustedRoots = trustedRoots
        self.intermediates = intermediates
        self.purpose = purpose
        self.chains = chains
        intermediateKeys = intermediates.map { SHA256Key($0.der) }
        var description: [UInt8] = Array("receiptq chain v1".utf8)
        description += Self.counted(trustedRoots.map { SHA256Key($0.der) }) + Self.counted(intermediateKeys)
        description += Array((purpose ?? "").utf8)
        trustKey = SHA256Key(description)
    }

    /// The digest of `certificate` when it is one of the intermediates (the very X509).
    func intermediateKey(of certificate: Certificate) -> SHA256Key? {
        intermediates.firstIndex { $0.x509 == certificate.x509 }.map { intermediateKeys[$0] }
    }

    /// ``ChainVerifier/chainFailure(_:untrusted:trustedRoots:at:purpose:)`` for `leaf` (whose DER
    /// digest is `key`) and `untrusted`, which must be the certificates digested in `embeddedKeys`
    /// followed by the intermediates.
    func failure(_ leaf: Certificate, key: SHA256Key?, untrusted: [Certificate], embeddedKeys: [SHA256Key], at time: Date?) -> String? {
        if let key {
            var description = trustKey.bytes + key.bytes
            description += Self.counted(embeddedKeys)
            let chainKey = SHA256Key(description)
            let verdict: ChainVerdict
            if let cached = chains.verdict(chainKey) {
                verdict = cached
            } else {
                verdict = ChainVerifier.verdictIgnoringTime(leaf, untrusted: untrusted, trustedRoots: trustedRoots, purpose: purpose)
                chains.store(verdict, for: chainKey)
            }
            // The instant OpenSSL would use: the given time truncated to seconds, or now.
            let instant = Int64(time_t((time ?? Date()).timeIntervalSince1970))
            if case .valid(let window) = verdict, window.contains(instant) { return nil }
        }
        // Outside the window (or no time-free verdict): the full check, on the cached certificates.
        return ChainVerifier.chainFailure(leaf, untrusted: untrusted, trustedRoots: trustedRoots, at: time, purpose: purpose)
    }

    private static func counted(_ keys: [SHA256Key]) -> [UInt8] {
        var bytes = withUnsafeBytes(of: UInt32(keys.count).bigEndian) { Array($0) }
        for key in keys { bytes += key.bytes }
        return bytes
    }
}
