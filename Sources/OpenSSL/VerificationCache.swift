internal import COpenSSL
import Foundation
import Synchronization

/// A SHA-256 digest used as a cache key (of a certificate's DER, or of a chain's description).
struct SHA256Key: Hashable, Sendable {
    var words: (UInt64, UInt64, UInt64, UInt64)

    static func == (lhs: SHA256Key, rhs: SHA256Key) -> Bool {
        lhs.words == rhs.words
    }

    func hash(into hasher: inout Hasher) {
        // Already uniformly distributed: one word is plenty.
        hasher.combine(words.0)
    }

    /// SHA-256 of `bytes`, with a digest fetched once rather than per call (OpenSSL 3.0 fetches
    /// implicitly on every `EVP_sha256()` use).
    init(_ bytes: UnsafeRawBufferPointer) {
        var output = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        var size: UInt32 = 0
        let ok = withUnsafeMutableBytes(of: &output) { out in
            EVP_Digest(bytes.baseAddress, bytes.count, out.baseAddress?.assumingMemoryBound(to: UInt8.self), &size, FetchedDigest.sha256.md, nil)
        }
        // As in ``Digest``: a wrong digest must never be returned silently.
        precondition(ok == 1 && size == 32, "EVP_Digest failed: \(OpenSSLError.drainQueue())")
        words = output
    }

    init(_ bytes: [UInt8]) {
        self = bytes.withUnsafeBytes { SHA256Key($0) }
    }

    /// The 32 digest bytes.
    var bytes: [UInt8] {
        withUnsafeBytes(of: words) { Array($0) }
    }
}

/// An `EVP_MD` fetched once for the process (never freed).
final class FetchedDigest: @unchecked Sendable {
    let md: OpaquePointer?

    private init(_ name: String) {
        md = EVP_MD_fetch(nil, name, nil)
    }

    static let sha256 = FetchedDigest("SHA256")
}

/// The caches a ``PKCS7Verifier`` keeps its work in: parsed certificates and time-free chain
/// verdicts, both bounded and thread-safe. Every verifier shares ``shared`` unless given another
/// (a test's small one, say). Entries are keyed by content (SHA-256 of DER; of the trust anchors,
/// certificates and purpose for chains), so verifiers with different anchors can share one.
public final class PKCS7VerificationCache: Sendable {
    /// The process-wide cache: 256 + 64 certificates (≈ 1–2 MB at most), 256 chain verdicts.
    public static let shared = PKCS7VerificationCache()

    let certificates: CertificateCache
    let chains: ChainVerdictCache

    /// - Parameters:
    ///   - certificateCapacity: certificates kept on probation (seen, not yet part of a valid signature).
    ///   - protectedCertificateCapacity: certificates kept because they were part of a valid signature.
    ///   - chainCapacity: chain verdicts.
    public init(certificateCapacity: Int = 256, protectedCertificateCapacity: Int = 64, chainCapacity: Int = 256) {
        certificates = CertificateCache(probationCapacity: max(1, certificateCapacity), protectedCapacity: max(0, protectedCertificateCapacity))
        chains = ChainVerdictCache(capacity: max(1, chainCapacity))
    }

    /// What the cache holds now.
    public struct Counts: Sendable, Equatable {
        /// Certificates on probation.
        public var certificates: Int
        /// Certificates kept because they took part in a valid signature.
        public var protectedCertificates: Int
        /// Chain verdicts.
        public var chains: Int
    }

    /// What the cache holds now.
    public var counts: Counts {
        let certificateCounts = certificates.counts
        return Counts(certificates: certificateCounts.probation, protectedCertificates: certificateCounts.protected, chains: chains.count)
    }
}

/// Parsed certificates, keyed by the SHA-256 of their DER, so that an embedded certificate is
/// decoded (and its public key with it: ≈ 1 M instructions in OpenSSL 3.0) once, not per receipt.
///
/// Bounded, and thread-safe behind a `Mutex`. Two segments, so a flood of receipts carrying
/// never-seen certificates cannot push out the few that keep verifying (Apple's): every new
/// certificate enters a probation segment (least recently used evicted first); one that took part
/// in a valid verification is promoted to a small protected segment.
final class CertificateCache: Sendable {
    private struct Entry {
        var certificate: Certificate
        var der: [UInt8]
        var lastUse: UInt64
        var isProtected: Bool
    }

    private struct State {
        var entries: [SHA256Key: Entry] = [:]
        var clock: UInt64 = 0
        var protectedCount = 0
    }

    private let state = Mutex(State())
    let probationCapacity: Int
    let protectedCapacity: Int

    init(probationCapacity: Int, protectedCapacity: Int) {
        self.probationCapacity = probationCapacity
        self.protectedCapacity = protectedCapacity
    }

    /// The certificate whose DER is exactly `der`, decoding it on a miss; nil when OpenSSL cannot
    /// decode it (or it does not span all of `der`).
    func certificate(der: UnsafeBufferPointer<UInt8>) -> (key: SHA256Key, certificate: Certificate)? {
        let key = SHA256Key(UnsafeRawBufferPointer(der))
        let hit: Certificate? = state.withLock { state in
            state.clock += 1
            // The digest finds the entry; the bytes are still compared, so a hit never rests on it.
            guard let entry = state.entries[key], entry.der.withUnsafeBufferPointer({ Self.equal($0, der) }) else { return nil }
            let now = state.clock
            state.entries[key]?.lastUse = now
            return entry.certificate
        }
        if let hit { return (key, hit) }
        let bytes = Array(der)
        guard let certificate = try? Certificate(der: bytes) else { return nil }
        state.withLock { state in
            guard state.entries[key] == nil else { return }
            state.clock += 1
            if state.entries.count - state.protectedCount >= probationCapacity {
                evictLeastRecentlyUsed(&state, protected: false)
            }
            state.entries[key] = Entry(certificate: certificate, der: bytes, lastUse: state.clock, isProtected: false)
        }
        return (key, certificate)
    }

    private static func equal(_ lhs: UnsafeBufferPointer<UInt8>, _ rhs: UnsafeBufferPointer<UInt8>) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard let left = lhs.baseAddress, let right = rhs.baseAddress else { return true }
        return memcmp(left, right, lhs.count) == 0
    }

    /// Moves these certificates to the protected segment (they were part of a valid verification).
    func promote(_ keys: [SHA256Key]) {
        state.withLock { state in
            for key in keys {
                guard let entry = state.entries[key], !entry.isProtected else { continue }
                if state.protectedCount >= protectedCapacity {
                    // Demote the protected entry used longest ago instead of dropping it.
                    if let oldest = state.entries.filter({ $0.value.isProtected }).min(by: { $0.value.lastUse < $1.value.lastUse }) {
                        state.entries[oldest.key]?.isProtected = false
                        state.protectedCount -= 1
                        if state.entries.count - state.protectedCount > probationCapacity {
                            evictLeastRecentlyUsed(&state, protected: false)
                        }
                    }
                }
                state.entries[key]?.isProtected = true
                state.protectedCount += 1
            }
        }
    }

    /// How many certificates are held: (probation, protected).
    var counts: (probation: Int, protected: Int) {
        state.withLock { ($0.entries.count - $0.protectedCount, $0.protectedCount) }
    }

    private func evictLeastRecentlyUsed(_ state: inout State, protected: Bool) {
        guard let oldest = state.entries.filter({ $0.value.isProtected == protected }).min(by: { $0.value.lastUse < $1.value.lastUse })
        else { return }
        state.entries[oldest.key] = nil
        if protected { state.protectedCount -= 1 }
    }
}

/// Time-free chain verdicts (``ChainVerdict``), keyed by everything `X509_verify_cert` sees: the
/// trust anchors, the untrusted certificates in order, the leaf and the purpose. Bounded (least
/// recently used evicted first) and thread-safe.
final class ChainVerdictCache: Sendable {
    private struct Entry {
        var verdict: ChainVerdict
        var lastUse: UInt64
    }

    private struct State {
        var entries: [SHA256Key: Entry] = [:]
        var clock: UInt64 = 0
    }

    private let state = Mutex(State())
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
    }

    func verdict(_ key: SHA256Key) -> ChainVerdict? {
        state.withLock { state in
            state.clock += 1
            guard state.entries[key] != nil else { return nil }
            let now = state.clock
            state.entries[key]?.lastUse = now
            return state.entries[key]?.verdict
        }
    }

    func store(_ verdict: ChainVerdict, for key: SHA256Key) {
        state.withLock { state in
            state.clock += 1
            if state.entries[key] == nil, state.entries.count >= capacity,
                let oldest = state.entries.min(by: { $0.value.lastUse < $1.value.lastUse })
            {
                state.entries[oldest.key] = nil
            }
            state.entries[key] = Entry(verdict: verdict, lastUse: state.clock)
        }
    }

    var count: Int { state.withLock { $0.entries.count } }
}
