internal import COpenSSL
import Synchronization

/// ECDSA P-256 with SHA-256 as JOSE uses it (`ES256`, RFC 7518 §3.4): the signature is the fixed
/// 64-byte `r ‖ s`, not the DER `ECDSA-Sig-Value` OpenSSL produces and expects.
///
/// Both directions convert at this one place, so no caller ever sees a DER signature.
public enum ES256 {
    /// Signs `data` (hashing it with SHA-256 first).
    ///
    /// - Parameter key: a P-256 private key.
    /// - Returns: the 64-byte `r ‖ s`.
    /// - Throws: ``OpenSSLError`` with code `.signing` (for instance, a key that is not P-256).
    public static func sign(_ data: some Collection<UInt8>, key: PrivateKey) throws -> [UInt8] {
        guard key.isP256 else { throw OpenSSLError(.signing, message: "ES256 needs a P-256 key") }
        let der = try key.digestSign(Array(data), digest: EVP_sha256())
        guard let raw = rawSignature(der: der) else {
            throw OpenSSLError.drain(.signing, "ECDSA_SIG")
        }
        return raw
    }

    /// Whether `signature` (64-byte `r ‖ s`) is `key`'s ES256 signature of `data`.
    ///
    /// Never throws: a malformed signature or a key of another type is simply not valid.
    public static func verify(signature: [UInt8], of data: some Collection<UInt8>, key: PublicKey) -> Bool {
        verify(signature: signature, of: Array(data), key: key)
    }

    /// ``verify(signature:of:key:)`` for bytes already in an array: the generic form, called from
    /// another module, copied a JWS's signing input a byte at a time through witness tables.
    public static func verify(signature: [UInt8], of message: [UInt8], key: PublicKey) -> Bool {
        defer { OpenSSLError.drainQueue() }
        guard signature.count == 64, key.isP256, let der = derSignature(raw: signature),
            let context = EVP_MD_CTX_new()
        else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key.pkey) == 1 else { return false }
        return EVP_DigestVerify(context, der, der.count, message, message.count) == 1
    }

    /// DER `ECDSA-Sig-Value` → 64-byte `r ‖ s` (each left-padded to 32 bytes).
    static func rawSignature(der: [UInt8]) -> [UInt8]? {
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { return nil }
        defer { ECDSA_SIG_free(signature) }
        guard let r = ECDSA_SIG_get0_r(signature), let s = ECDSA_SIG_get0_s(signature) else { return nil }
        var raw = [UInt8](repeating: 0, count: 64)
        let ok = raw.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(r, buffer.baseAddress, 32) == 32 && BN_bn2binpad(s, buffer.baseAddress! + 32, 32) == 32
        }
        return ok ? raw : nil
    }

    /// 64-byte `r ‖ s` → DER `ECDSA-Sig-Value`.
    static func derSignature(raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        // set0 takes ownership of both numbers.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        return try? derEncode("i2d_ECDSA_SIG", .signing) { i2d_ECDSA_SIG(signature, $0) }
    }
}

/// A public key held by OpenSSL: a certificate's, or one read from a `SubjectPublicKeyInfo`.
///
/// `@unchecked Sendable` for the same reason as ``PrivateKey``: never mutated after `init`.
public final class PublicKey: @unchecked Sendable {
    let pkey: OpaquePointer
    /// Whether this is an EC key on P-256 (prime256v1), the only curve ES256 allows; read once
    /// (a provider parameter query), since every verification asks.
    public let isP256: Bool

    init(owning pkey: OpaquePointer) {
        self.pkey = pkey
        self.isP256 = curveIsP256(pkey)
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// Reads a DER `SubjectPublicKeyInfo`; trailing bytes are rejected.
    ///
    /// - Throws: ``OpenSSLError`` with code `.decode`.
    public convenience init(spki der: [UInt8]) throws {
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            guard let start = buffer.baseAddress, buffer.count > 0 else { return nil }
            var cursor: UnsafePointer<UInt8>? = start
            let key = d2i_PUBKEY(nil, &cursor, buffer.count)
            if let key, cursor.map({ $0 - start }) != buffer.count {
                EVP_PKEY_free(key)
                return nil
            }
            return key
        }
        guard let key else { throw OpenSSLError.drain(.decode, "d2i_PUBKEY") }
        self.init(owning: key)
    }

    /// The DER `SubjectPublicKeyInfo`.
    public var spki: [UInt8] { (try? derEncode("i2d_PUBKEY", .other) { i2d_PUBKEY(pkey, $0) }) ?? [] }

}

extension PrivateKey {
    /// Generates a new EC key on P-256 (for ES256 signing: JWTs, JWS).
    ///
    /// - Throws: ``OpenSSLError`` with code `.keyGeneration`.
    public static func generateP256() throws -> PrivateKey {
        guard let pkey = copenssl_ec_generate("P-256") else { throw OpenSSLError.drain(.keyGeneration, "EVP_EC_gen(P-256)") }
        return PrivateKey(owningKey: pkey)
    }

    /// Whether this is an EC key on P-256.
    public var isP256: Bool { curveIsP256(pkey) }

    /// The matching public key.
    public var publicKey: PublicKey {
        get throws {
            let der = try derEncode("i2d_PUBKEY", .other) { i2d_PUBKEY(pkey, $0) }
            return try PublicKey(spki: der)
        }
    }
}

extension Certificate {
    /// The subject's public key.
    ///
    /// - Throws: ``OpenSSLError`` with code `.decode` when the key cannot be read.
    public var publicKey: PublicKey {
        get throws {
            if let known = memo.withLock({ $0.publicKey }) { return known }
            guard let key = X509_get_pubkey(x509) else { throw OpenSSLError.drain(.decode, "X509_get_pubkey") }
            let publicKey = PublicKey(owning: key)
            memo.withLock { $0.publicKey = publicKey }
            return publicKey
        }
    }

    /// Whether the certificate carries an extension with the dotted OID `oid` (critical or not).
    /// Apple marks its signing certificates this way (for instance `1.2.840.113635.100.6.11.1`).
    public func hasExtension(oid: String) -> Bool {
        if let known = memo.withLock({ $0.extensions[oid] }) { return known }
        let found = readHasExtension(oid: oid)
        memo.withLock { memo in
            // Bounded: callers ask about a few fixed OIDs.
            if memo.extensions.count < 16 { memo.extensions[oid] = found }
        }
        return found
    }

    private func readHasExtension(oid: String) -> Bool {
        defer { OpenSSLError.drainQueue() }
        guard let object = OBJ_txt2obj(oid, 1) else { return false }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(x509, object, -1) >= 0
    }
}

private func curveIsP256(_ pkey: OpaquePointer) -> Bool {
    guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC else { return false }
    var name = [CChar](repeating: 0, count: 64)
    var length = 0
    guard EVP_PKEY_get_utf8_string_param(pkey, "group", &name, name.count, &length) == 1 else {
        OpenSSLError.drainQueue()
        return false
    }
    return String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self) == "prime256v1"
}
