internal import COpenSSL

/// Authenticated encryption of small secrets at rest (In-App Purchase keys): AES-256-GCM with a
/// random 96-bit nonce per seal, so the same secret never seals to the same bytes twice.
///
/// The sealed form is `version(1) ‖ nonce(12) ‖ ciphertext ‖ tag(16)`; `context` (for instance the
/// app id) is authenticated but not stored, so a sealed key copied onto another app's row does not
/// open there.
public struct SecretBox: Sendable {
    private let key: [UInt8]

    /// A box over a 32-byte key.
    /// - Throws: ``OpenSSLError`` with code `.other` for a key of another length.
    public init(key: [UInt8]) throws {
        guard key.count == 32 else { throw OpenSSLError(.other, message: "a secret box key is 32 bytes") }
        self.key = key
    }

    /// Encrypts `plaintext`, binding it to `context`.
    /// - Throws: ``OpenSSLError`` when OpenSSL fails (memory exhaustion).
    public func seal(_ plaintext: [UInt8], context: [UInt8]) throws -> [UInt8] {
        let nonce = SecureRandom.bytes(12)
        let (ciphertext, tag) = try crypt(encrypt: true, nonce: nonce, input: plaintext, context: context, tag: nil)
        return [1] + nonce + ciphertext + tag
    }

    /// Decrypts what ``seal(_:context:)`` produced with the same key and context.
    /// - Returns: nil when the bytes were altered, the key differs, or the context differs.
    public func open(_ sealed: [UInt8], context: [UInt8]) -> [UInt8]? {
        guard sealed.count >= 1 + 12 + 16, sealed[0] == 1 else { return nil }
        let nonce = Array(sealed[1..<13])
        let ciphertext = Array(sealed[13..<(sealed.count - 16)])
        let tag = Array(sealed.suffix(16))
        return try? crypt(encrypt: false, nonce: nonce, input: ciphertext, context: context, tag: tag).output
    }

    private func crypt(
        encrypt: Bool, nonce: [UInt8], input: [UInt8], context: [UInt8], tag: [UInt8]?
    ) throws -> (output: [UInt8], tag: [UInt8]) {
        defer { OpenSSLError.drainQueue() }
        guard let ctx = EVP_CIPHER_CTX_new() else { throw OpenSSLError.drain(.other, "EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let initialise = encrypt ? EVP_EncryptInit_ex : EVP_DecryptInit_ex
        guard initialise(ctx, EVP_aes_256_gcm(), nil, key, nonce) == 1 else { throw OpenSSLError.drain(.other, "EVP_CipherInit_ex") }
        var length: Int32 = 0
        if !context.isEmpty {
            let update = encrypt ? EVP_EncryptUpdate : EVP_DecryptUpdate
            guard update(ctx, nil, &length, context, Int32(context.count)) == 1 else { throw OpenSSLError.drain(.other, "AAD") }
        }
        var output = [UInt8](repeating: 0, count: input.count + 16)
        var written: Int32 = 0
        let update = encrypt ? EVP_EncryptUpdate : EVP_DecryptUpdate
        guard update(ctx, &output, &written, input, Int32(input.count)) == 1 else { throw OpenSSLError.drain(.other, "EVP_CipherUpdate") }
        var produced = Int(written)
        if var expected = tag {
            guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, &expected) == 1 else { throw OpenSSLError.drain(.other, "GCM tag") }
        }
        var final: Int32 = 0
        let finish = encrypt ? EVP_EncryptFinal_ex : EVP_DecryptFinal_ex
        let ok = output.withUnsafeMutableBufferPointer { buffer in finish(ctx, buffer.baseAddress! + produced, &final) == 1 }
        // For decryption this is where an altered ciphertext, key or context shows.
        guard ok else { throw OpenSSLError(.verification, message: "authentication failed") }
        produced += Int(final)
        var outputTag = [UInt8](repeating: 0, count: 16)
        if encrypt {
            guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, &outputTag) == 1 else { throw OpenSSLError.drain(.other, "GCM tag") }
        }
        return (Array(output.prefix(produced)), outputTag)
    }
}
