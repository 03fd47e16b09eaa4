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
            if let time {
                // Also sets X509_V_FLAG_USE_CHECK_TIME, so validity is judged at `time`.
                X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(context), time_t(time.timeIntervalSince1970))
            }
            return X509_verify_cert(context)
        }
        guard let result, result >= 0 else { return "malformed" }
        guard result != 1 else { return nil }
        switch X509_STORE_CTX_get_error(context) {
        case X509_V_ERR_CERT_HAS_EXPIRED: return "certificate_expired"
        case X509_V_ERR_CERT_NOT_YET_VALID: return "certificate_not_yet_valid"
        default: return "untrusted_chain"
        }
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
        defer { OpenSSLError.drainQueue() }
        guard let context = EVP_MD_CTX_new() else { throw OpenSSLError.drain(.signing, "EVP_DigestSign") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha1(), nil, key.pkey) == 1 else { throw OpenSSLError.drain(.signing, "EVP_DigestSign") }
        var length = 0
        let sized = data.withUnsafeBufferPointer { EVP_DigestSign(context, nil, &length, $0.baseAddress, $0.count) }
        guard sized == 1 else { throw OpenSSLError.drain(.signing, "EVP_DigestSign") }
        var signature = [UInt8](repeating: 0, count: length)
        let signed = signature.withUnsafeMutableBufferPointer { out in
            data.withUnsafeBufferPointer { EVP_DigestSign(context, out.baseAddress, &length, $0.baseAddress, $0.count) }
        }
        guard signed == 1 else { throw OpenSSLError.drain(.signing, "EVP_DigestSign") }
        return withExtendedLifetime(key) { Array(signature.prefix(length)) }
    }
}
