internal import COpenSSL
import Foundation

public import struct Foundation.Date

/// Certificate chain verification against explicit trust anchors (never the system store).
public enum ChainVerifier {
    /// Whether `leaf` chains to one of `trustedRoots`, with `intermediates` as untrusted helpers,
    /// at `time` (or now when nil).
    ///
    /// No certificate purpose is checked, so trust rests on the roots and intermediates you pass:
    /// for iOS 6 transaction receipts pass only the iTunes Store CA as intermediate (developer
    /// certificates also chain to Apple's root, through WWDR).
    ///
    /// - Returns: `valid`, and when invalid a bounded reason: `untrusted_chain`,
    ///   `certificate_expired`, `certificate_not_yet_valid`, or `malformed`.
    public static func verify(
        _ leaf: Certificate,
        intermediates: [Certificate],
        trustedRoots: [Certificate],
        at time: Date?
    ) -> (valid: Bool, reason: String?) {
        let reason = chainFailure(leaf, untrusted: intermediates, trustedRoots: trustedRoots, at: time, purpose: nil)
        return (reason == nil, reason)
    }

    /// Runs `X509_verify_cert` and maps its error to a bounded reason; nil when the chain is valid.
    static func chainFailure(
        _ leaf: Certificate,
        untrusted: [Certificate],
        trustedRoots: [Certificate],
        at time: Date?,
        purpose: String?
    ) -> String? {
        defer { OpenSSLError.drainQueue() }
        return evaluate(leaf, untrusted: untrusted, trustedRoots: trustedRoots, purpose: purpose) { context in
            if let time {
                // Also sets X509_V_FLAG_USE_CHECK_TIME, so validity is judged at `time`.
                X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(context), time_t(time.timeIntervalSince1970))
            }
        } onSuccess: { _ in
            nil
        }
    }

    /// The chain verdict with every validity period ignored (`X509_V_FLAG_NO_CHECK_TIME`), for
    /// ``ChainVerdictCache``: `.valid` carries the validity window of the chain OpenSSL built.
    ///
    /// Why that window decides the verdict at any instant `t` inside it: with a check time, OpenSSL
    /// picks, among candidate issuers, the first one valid at `t` (else the one expiring last); without
    /// one it picks the first candidate. When every certificate of the time-free chain is valid at `t`,
    /// both choose the same issuer at every step, build the same chain, and all other checks (purpose,
    /// trust, signatures) do not depend on time. Outside the window the caller must run the real check.
    static func verdictIgnoringTime(
        _ leaf: Certificate,
        untrusted: [Certificate],
        trustedRoots: [Certificate],
        purpose: String?
    ) -> ChainVerdict {
        defer { OpenSSLError.drainQueue() }
        var verdict = ChainVerdict.invalid
        let failure = evaluate(leaf, untrusted: untrusted, trustedRoots: trustedRoots, purpose: purpose) { context in
            X509_VERIFY_PARAM_set_flags(X509_STORE_CTX_get0_param(context), UInt(X509_V_FLAG_NO_CHECK_TIME))
        } onSuccess: { context in
            verdict = ValidityWindow(chain: X509_STORE_CTX_get0_chain(context)).map(ChainVerdict.valid) ?? .invalid
            return nil
        }
        return failure == nil ? verdict : .invalid
    }

    /// One `X509_verify_cert` run; `configure` adjusts the context's parameters before it.
    private static func evaluate(
        _ leaf: Certificate,
        untrusted: [Certificate],
        trustedRoots: [Certificate],
        purpose: String?,
        configure: (OpaquePointer) -> Void,
        onSuccess: (OpaquePointer) -> String?
    ) -> String? {
        guard let store = X509_STORE_new() else { return "malformed" }
        defer { X509_STORE_free(store) }
        for root in trustedRoots where X509_STORE_add_cert(store, root.x509) != 1 {
            // Adding the same root twice reports an error; the store still holds it.
            OpenSSLError.drainQueue()
        }
        guard let context = X509_STORE_CTX_new() else { return "malformed" }
        defer { X509_STORE_CTX_free(context) }
        let result: Int32? = try? withCertificateStack(untrusted) { stack in
            guard X509_STORE_CTX_init(context, store, leaf.x509, stack) == 1 else { return -1 }
            if let purpose, X509_STORE_CTX_set_default(context, purpose) != 1 { return -1 }
            configure(context)
            return X509_verify_cert(context)
        }
        guard let result, result >= 0 else { return "malformed" }
        guard result != 1 else { return withExtendedLifetime((leaf, untrusted, trustedRoots)) { onSuccess(context) } }
        switch X509_STORE_CTX_get_error(context) {
        case X509_V_ERR_CERT_HAS_EXPIRED: return "certificate_expired"
        case X509_V_ERR_CERT_NOT_YET_VALID: return "certificate_not_yet_valid"
        default: return "untrusted_chain"
        }
    }
}

/// What a time-free chain check concluded (see ``ChainVerifier/verdictIgnoringTime(_:untrusted:trustedRoots:purpose:)``).
enum ChainVerdict: Sendable, Equatable {
    /// The chain verifies at every instant of the window.
    case valid(ValidityWindow)
    /// It failed without time, or its dates are not in a form this cache reproduces exactly: the
    /// caller must run the full check at the instant it cares about.
    case invalid
}

/// The instants at which every certificate of a chain is valid, in whole seconds since 1970:
/// `notBefore <= t < notAfter`, exactly as OpenSSL 3.0's `X509_cmp_time` judges them.
struct ValidityWindow: Sendable, Equatable {
    var notBefore: Int64
    var notAfter: Int64

    /// Instants outside this range (years 1970…9999) are left to OpenSSL, whose time conversions
    /// fail there in ways not worth reproducing.
    private static let supported: ClosedRange<Int64> = 0...253_402_300_799

    /// Whether every certificate of the chain is valid at `time` (seconds since 1970); false when
    /// `time` is outside the supported range, so the caller falls back to OpenSSL.
    func contains(_ time: Int64) -> Bool {
        Self.supported.contains(time) && notBefore <= time && time < notAfter
    }

    /// The intersection of the validity periods of `chain`'s certificates; nil when any date is not
    /// in the strict RFC 5280 form (`YYMMDDHHMMSSZ` / `YYYYMMDDHHMMSSZ`) that `X509_cmp_time` accepts.
    init?(chain: OpaquePointer?) {
        guard let chain, copenssl_sk_X509_num(chain) > 0 else { return nil }
        var notBefore = Int64.min
        var notAfter = Int64.max
        for index in 0..<copenssl_sk_X509_num(chain) {
            guard let x509 = copenssl_sk_X509_value(chain, index),
                let start = Self.seconds(X509_get0_notBefore(x509)),
                let end = Self.seconds(X509_get0_notAfter(x509))
            else { return nil }
            notBefore = max(notBefore, start)
            notAfter = min(notAfter, end)
        }
        self.notBefore = notBefore
        self.notAfter = notAfter
    }

    init(notBefore: Int64, notAfter: Int64) {
        self.notBefore = notBefore
        self.notAfter = notAfter
    }

    private static func seconds(_ time: UnsafePointer<ASN1_TIME>?) -> Int64? {
        guard let time else { return nil }
        let expected: Int32
        switch ASN1_STRING_type(time) {
        case V_ASN1_UTCTIME: expected = 13
        case V_ASN1_GENERALIZEDTIME: expected = 15
        default: return nil
        }
        guard ASN1_STRING_length(time) == expected, let data = ASN1_STRING_get0_data(time) else { return nil }
        let text = UnsafeBufferPointer(start: data, count: Int(expected))
        guard text.last == UInt8(ascii: "Z"), text.dropLast().allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else {
            OpenSSLError.drainQueue()
            return nil
        }
        return Int64(timegm(&parts))
    }
}

/// Raw RSA signatures.
public enum RSASignature {
    /// Verifies an RSA PKCS#1 v1.5 SHA-1 signature over `data` with `certificate`'s public key, as
    /// used by iOS 6 transaction receipts (signed bytes: version byte ‖ purchase-info).
    /// Only the signature is checked, not the certificate: use ``ChainVerifier`` for that.
    public static func verifySHA1(signature: [UInt8], data: [UInt8], certificate: Certificate) -> Bool {
        defer { OpenSSLError.drainQueue() }
        guard let key = X509_get0_pubkey(certificate.x509), let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha1(), nil, key) == 1 else { return false }
        let result = signature.withUnsafeBufferPointer { sig in
            data.withUnsafeBufferPointer { message in
                EVP_DigestVerify(context, sig.baseAddress, sig.count, message.baseAddress, message.count)
            }
        }
        return withExtendedLifetime(certificate) { result == 1 }
    }

    /// Signs `data` with RSA PKCS#1 v1.5 SHA-1, the scheme of iOS 6 transaction receipts; for
    /// forging test receipts only (Apple's own keys are never ours).
    ///
    /// - Throws: ``OpenSSLError`` with code `.signing`.
    public static func signSHA1(data: [UInt8], key: PrivateKey) throws -> [UInt8] {
        try key.digestSign(data, digest: EVP_sha1())
    }
}
