internal import COpenSSL

/// Runs `body` with a read-only memory BIO over `bytes`; the BIO never outlives the buffer.
func withReadBIO<R>(_ bytes: [UInt8], _ body: (OpaquePointer) throws -> R?) throws -> R? {
    try bytes.withUnsafeBytes { buffer in
        // A zero-length buffer still needs a valid pointer; BIO_new_mem_buf rejects NULL.
        let base = buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1)
        guard let base, let bio = BIO_new_mem_buf(base, Int32(clamping: buffer.count)) else {
            throw OpenSSLError.drain(.other, "BIO_new_mem_buf")
        }
        defer { BIO_free(bio) }
        return try body(bio)
    }
}

/// Runs `body` with a fresh memory BIO and returns everything written to it.
func collectingBIO(_ operation: String, _ code: OpenSSLError.Code, _ body: (OpaquePointer) -> Bool) throws -> [UInt8] {
    guard let bio = BIO_new(BIO_s_mem()) else { throw OpenSSLError.drain(.other, "BIO_new") }
    defer { BIO_free(bio) }
    guard body(bio) else { throw OpenSSLError.drain(code, operation) }
    return readAll(bio)
}

/// Drains a readable BIO.
func readAll(_ bio: OpaquePointer) -> [UInt8] {
    var output: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
        let count = chunk.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
        guard count > 0 else { break }
        output.append(contentsOf: chunk[0..<Int(count)])
    }
    return output
}

/// DER-encodes with one of OpenSSL's two-pass `i2d_*` functions.
func derEncode(
    _ operation: String, _ code: OpenSSLError.Code, _ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32
) throws -> [UInt8] {
    let length = encode(nil)
    guard length > 0 else { throw OpenSSLError.drain(code, operation) }
    var bytes = [UInt8](repeating: 0, count: Int(length))
    let written = bytes.withUnsafeMutableBufferPointer { buffer -> Int32 in
        // i2d advances the pointer it is given, so hand it a copy.
        var cursor = buffer.baseAddress
        return encode(&cursor)
    }
    guard written == length else { throw OpenSSLError.drain(code, operation) }
    return bytes
}

/// Builds a borrowed `STACK_OF(X509)` over `certificates`; the caller keeps them alive for its use.
func withCertificateStack<R>(_ certificates: [Certificate], _ body: (OpaquePointer) throws -> R) throws -> R {
    guard let stack = copenssl_sk_X509_new_null() else { throw OpenSSLError.drain(.other, "sk_X509_new_null") }
    defer { copenssl_sk_X509_free(stack) }
    for certificate in certificates {
        guard copenssl_sk_X509_push(stack, certificate.x509) > 0 else { throw OpenSSLError.drain(.other, "sk_X509_push") }
    }
    return try withExtendedLifetime(certificates) { try body(stack) }
}
