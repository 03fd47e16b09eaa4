internal import COpenSSL
import Foundation

public import struct Foundation.Date

/// PKCS#7 SignedData, in the shape Apple uses for app receipts.
public enum PKCS7 {
    /// The signer's message digest.
    public enum DigestAlgorithm: String, Sendable {
        /// SHA-1: Apple's receipts signed before 2023 (WWDR 2008/2013 chains).
        case sha1
        /// SHA-256: newer receipts (WWDR G5 chain) and Xcode StoreKit test receipts.
        case sha256
    }

    /// PKCS#7 SignedData (DER) over `content` with the content embedded (not detached), the signer
    /// certificate and `chain` certificates included, and no signed attributes (`PKCS7_NOATTR`), like
    /// Apple's app receipts.
    ///
    /// - Throws: ``OpenSSLError`` with code `.signing`.
    public static func sign(
        content: [UInt8],
        signer: Certificate,
        key: PrivateKey,
        chain: [Certificate],
        digest: DigestAlgorithm
    ) throws -> [UInt8] {
        let flags = Int32(PKCS7_BINARY | PKCS7_NOATTR)
        let md = digest == .sha1 ? EVP_sha1() : EVP_sha256()
        let der: [UInt8]? = try withCertificateStack(chain) { stack in
            try withReadBIO(content) { data in
                // PKCS7_PARTIAL defers signing, so the signer is added with our digest rather than
                // PKCS7_sign's default one; PKCS7_final then hashes the content and signs.
                guard let p7 = PKCS7_sign(nil, nil, stack, nil, flags | Int32(PKCS7_PARTIAL)) else {
                    throw OpenSSLError.drain(.signing, "PKCS7_sign")
                }
                defer { PKCS7_free(p7) }
                guard PKCS7_sign_add_signer(p7, signer.x509, key.pkey, md, flags) != nil else {
                    throw OpenSSLError.drain(.signing, "PKCS7_sign_add_signer")
                }
                guard PKCS7_final(p7, data, flags) == 1 else { throw OpenSSLError.drain(.signing, "PKCS7_final") }
                return try derEncode("i2d_PKCS7", .signing) { i2d_PKCS7(p7, $0) }
            }
        }
        guard let der else { throw OpenSSLError.drain(.signing, "PKCS7_sign") }
        return withExtendedLifetime((signer, key)) { der }
    }

    /// The outcome of ``verify(der:trustedRoots:intermediates:at:)``; never thrown.
    public struct Verification: Sendable, Equatable {
        /// True only when the signature matches and the signer chains to a trusted root at the time.
        public var valid: Bool
        /// Why not, one of: `not_pkcs7`, `not_signed_data`, `no_content`, `no_signer`,
        /// `signature_mismatch`, `untrusted_chain`, `certificate_expired`,
        /// `certificate_not_yet_valid`, `malformed`; nil when valid.
        public var reason: String?
        /// The signer certificate's common name, when a signer was found.
        public var signerCommonName: String?
        /// The signer's digest, `"sha1"` or `"sha256"` (other algorithms by OpenSSL short name).
        public var digest: String?
        /// The embedded content, when the signature matched (even if the chain did not).
        public var content: [UInt8]?

        /// Creates a verification result.
        public init(valid: Bool, reason: String? = nil, signerCommonName: String? = nil, digest: String? = nil, content: [UInt8]? = nil) {
            self.valid = valid
            self.reason = reason
            self.signerCommonName = signerCommonName
            self.digest = digest
            self.content = content
        }
    }

    /// Verifies signature + chain to `trustedRoots` evaluated at `time` (`X509_VERIFY_PARAM_set_time`;
    /// now when nil), with untrusted intermediates taken from the PKCS#7's own certificate set plus
    /// `intermediates`. Never crashes on garbage; returns `valid == false` with a reason.
    ///
    /// Signature and chain are checked separately (the signature with `PKCS7_NOVERIFY`, the chain
    /// with `X509_verify_cert` and the `smime_sign` purpose, as `PKCS7_verify` does) so that the
    /// chain error code, not a formatted string, decides the reason. BER indefinite lengths, as in
    /// Xcode StoreKit receipts, are accepted.
    ///
    /// - Parameter checkPurpose: keep `true` in production. The `smime_sign` purpose check is what
    ///   stops any other Apple-issued certificate (every developer's code-signing certificate chains
    ///   to Apple's root) from signing receipts. Only Xcode's StoreKit test certificate, whose
    ///   extended key usage is code signing, needs `false`; a purpose failure reads `untrusted_chain`.
    public static func verify(
        der: [UInt8],
        trustedRoots: [Certificate],
        intermediates: [Certificate] = [],
        at time: Date?,
        checkPurpose: Bool = true
    ) -> Verification {
        defer { OpenSSLError.drainQueue() }
        let decoded = der.withUnsafeBufferPointer { buffer -> UnsafeMutablePointer<COpenSSL.PKCS7>? in
            guard let start = buffer.baseAddress, buffer.count > 0 else { return nil }
            var cursor: UnsafePointer<UInt8>? = start
            return d2i_PKCS7(nil, &cursor, buffer.count)
        }
        guard let p7 = decoded else {
            return Verification(valid: false, reason: looksLikePKCS7(der) ? "malformed" : "not_pkcs7")
        }
        defer { PKCS7_free(p7) }
        let purpose = checkPurpose ? "smime_sign" : nil
        return verify(p7, intermediates: intermediates) { signer, untrusted in
            ChainVerifier.chainFailure(signer, untrusted: untrusted, trustedRoots: trustedRoots, at: time, purpose: purpose)
        }
    }

    /// The checks on a decoded SignedData, shared by this reference path and ``PKCS7Verifier``:
    /// `chainFailure` judges the chain from the signer, given every embedded certificate followed by
    /// `intermediates` as untrusted helpers, and returns nil or a reason.
    static func verify(
        _ p7: UnsafeMutablePointer<COpenSSL.PKCS7>,
        intermediates: [Certificate],
        chainFailure: (_ signer: Certificate, _ untrusted: [Certificate]) -> String?
    ) -> Verification {
        guard copenssl_pkcs7_type_is_signed(p7) == 1 else { return Verification(valid: false, reason: "not_signed_data") }
        guard copenssl_pkcs7_get_detached(p7) == 0 else { return Verification(valid: false, reason: "no_content") }

        var embedded: [Certificate] = []
        if let stack = copenssl_pkcs7_signed_certificates(p7) {
            for index in 0..<copenssl_sk_X509_num(stack) {
                if let certificate = Certificate(retaining: copenssl_sk_X509_value(stack, index)) {
                    embedded.append(certificate)
                }
            }
        }
        let digest = signerDigest(p7)
        guard let signer = signerCertificate(p7, extra: intermediates) else {
            return Verification(valid: false, reason: "no_signer", digest: digest)
        }
        var result = Verification(valid: false, signerCommonName: signer.subjectCommonName, digest: digest)

        let content: [UInt8]? = try? withCertificateStack(intermediates) { extra in
            guard let out = BIO_new(BIO_s_mem()) else { return nil }
            defer { BIO_free(out) }
            // NOVERIFY: the chain is checked below, where its error code is readable.
            guard PKCS7_verify(p7, extra, nil, nil, out, Int32(PKCS7_NOVERIFY | PKCS7_BINARY)) == 1 else { return nil }
            return readAll(out)
        }
        guard let content else {
            result.reason = signatureFailureReason()
            return result
        }
        result.content = content

        // Like PKCS7_verify, the chain starts at the signer and may use every embedded certificate.
        let untrusted = embedded + intermediates
        if let reason = chainFailure(signer, untrusted) {
            result.reason = reason
            return result
        }
        result.valid = true
        return result
    }

    /// The first signer's certificate, found by issuer and serial among embedded and `extra` certificates.
    private static func signerCertificate(_ p7: UnsafeMutablePointer<COpenSSL.PKCS7>, extra: [Certificate]) -> Certificate? {
        let signers: OpaquePointer?? = try? withCertificateStack(extra) { PKCS7_get0_signers(p7, $0, 0) }
        guard let signers = signers ?? nil else { return nil }
        defer { copenssl_sk_X509_free(signers) }
        guard copenssl_sk_X509_num(signers) == 1 else { return nil }
        return Certificate(retaining: copenssl_sk_X509_value(signers, 0))
    }

    private static func signerDigest(_ p7: UnsafeMutablePointer<COpenSSL.PKCS7>) -> String? {
        guard let infos = PKCS7_get_signer_info(p7), copenssl_sk_PKCS7_SIGNER_INFO_num(infos) > 0,
            let info = copenssl_sk_PKCS7_SIGNER_INFO_value(infos, 0)
        else { return nil }
        var algorithm: UnsafeMutablePointer<X509_ALGOR>? = nil
        PKCS7_SIGNER_INFO_get0_algs(info, nil, &algorithm, nil)
        guard let algorithm else { return nil }
        var object: OpaquePointer? = nil
        X509_ALGOR_get0(&object, nil, nil, algorithm)
        let nid = OBJ_obj2nid(object)
        switch nid {
        case NID_sha1: return "sha1"
        case NID_sha256: return "sha256"
        case NID_undef: return nil
        default: return OBJ_nid2sn(nid).map { String(cString: $0).lowercased() }
        }
    }

    /// Reads why PKCS7_verify failed: a digest or signature mismatch, or something structural.
    private static func signatureFailureReason() -> String {
        var reason = "malformed"
        while case let error = ERR_get_error(), error != 0 {
            if ERR_GET_LIB(error) == ERR_LIB_PKCS7,
                [PKCS7_R_SIGNATURE_FAILURE, PKCS7_R_DIGEST_FAILURE].contains(ERR_GET_REASON(error))
            {
                reason = "signature_mismatch"
            } else if ERR_GET_LIB(error) == ERR_LIB_RSA || ERR_GET_LIB(error) == ERR_LIB_EVP {
                // A tampered signature value fails inside RSA padding checks before PKCS#7 sees it.
                reason = "signature_mismatch"
            }
        }
        return reason
    }

    /// Whether undecodable bytes at least start like a ContentInfo (SEQUENCE … OID 1.2.840.113549.1.7),
    /// to tell truncated receipts (`malformed`) from unrelated input (`not_pkcs7`).
    private static func looksLikePKCS7(_ der: [UInt8]) -> Bool {
        let oidPrefix: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07]
        guard der.first == 0x30 else { return false }
        return der.prefix(24).indices.contains { der[$0...].starts(with: oidPrefix) }
    }
}
