internal import COpenSSL

/// An RSA or EC private key held by OpenSSL.
///
/// `@unchecked Sendable` is honest here: the `EVP_PKEY` is never mutated after `init`, and OpenSSL 3
/// allows concurrent read-only use (signing, encoding) of one key from several threads.
public final class PrivateKey: @unchecked Sendable {
    let pkey: OpaquePointer

    private init(owning pkey: OpaquePointer) {
        self.pkey = pkey
    }

    /// Takes ownership of `pkey` (for key generators in other files of the façade).
    convenience init(owningKey pkey: OpaquePointer) {
        self.init(owning: pkey)
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// Generates a new RSA key with public exponent 65537.
    ///
    /// - Throws: ``OpenSSLError`` with code `.keyGeneration`.
    public static func generateRSA(bits: Int = 2048) throws -> PrivateKey {
        guard (1024...16384).contains(bits), let pkey = copenssl_rsa_generate(UInt32(bits)) else {
            throw OpenSSLError.drain(.keyGeneration, "EVP_RSA_gen(\(bits))")
        }
        return PrivateKey(owning: pkey)
    }

    /// Reads an unencrypted PEM private key (PKCS#8 `PRIVATE KEY` or traditional `RSA PRIVATE KEY`).
    ///
    /// - Throws: ``OpenSSLError`` with code `.decode`, also for encrypted keys.
    public init(pem: String) throws {
        let key = try withReadBIO(Array(pem.utf8)) { bio in
            // A callback that supplies no passphrase, so an encrypted key fails instead of OpenSSL
            // prompting on the terminal.
            PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil)
        }
        guard let key else { throw OpenSSLError.drain(.decode, "PEM_read_bio_PrivateKey") }
        self.pkey = key
    }

    /// The key as unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    public func pemPKCS8() throws -> String {
        let bytes = try collectingBIO("PEM_write_bio_PrivateKey", .other) { bio in
            PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension PrivateKey {
    /// Signs `data`, hashed with SHA-256, in the form X.509 certificates and CMS carry a signature:
    /// PKCS#1 v1.5 for an RSA key, a DER `ECDSA-Sig-Value` for an EC key.
    ///
    /// - Throws: ``OpenSSLError`` with code `.signing`.
    public func signatureSHA256(_ data: [UInt8]) throws -> [UInt8] {
        try digestSign(data, digest: EVP_sha256())
    }

    /// `EVP_DigestSign` of `data` with `digest`: the façade's one signing call (this key's
    /// signatures, ``ES256`` and ``RSASignature``), so a fix to it reaches every signer.
    func digestSign(_ data: [UInt8], digest: OpaquePointer?) throws -> [UInt8] {
        // Whatever a successful call left on the thread's error queue is not the next call's error.
        defer { OpenSSLError.drainQueue() }
        guard let context = EVP_MD_CTX_new() else { throw OpenSSLError.drain(.signing, "EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, digest, nil, pkey) == 1 else { throw OpenSSLError.drain(.signing, "EVP_DigestSignInit") }
        var length = 0
        let sized = data.withUnsafeBufferPointer { EVP_DigestSign(context, nil, &length, $0.baseAddress, $0.count) }
        guard sized == 1 else { throw OpenSSLError.drain(.signing, "EVP_DigestSign") }
        var signature = [UInt8](repeating: 0, count: length)
        let signed = signature.withUnsafeMutableBufferPointer { out in
            data.withUnsafeBufferPointer { EVP_DigestSign(context, out.baseAddress, &length, $0.baseAddress, $0.count) }
        }
        guard signed == 1 else { throw OpenSSLError.drain(.signing, "EVP_DigestSign") }
        return Array(signature.prefix(length))
    }
}
