internal import COpenSSL

/// One-shot message digests.
public enum Digest {
    /// SHA-256 of `data` (32 bytes).
    public static func sha256(_ data: some Collection<UInt8>) -> [UInt8] {
        digest(data, EVP_sha256(), length: 32)
    }

    /// SHA-1 of `data` (20 bytes); only for legacy formats such as iOS 6 receipts.
    public static func sha1(_ data: some Collection<UInt8>) -> [UInt8] {
        digest(data, EVP_sha1(), length: 20)
    }

    /// MD5 of `data` (16 bytes); only where a protocol still requires it, such as HTTP Digest
    /// authentication (RFC 7616 keeps `algorithm=MD5` for older clients). Never for integrity.
    public static func md5(_ data: some Collection<UInt8>) -> [UInt8] {
        digest(data, EVP_md5(), length: 16)
    }

    /// HMAC-SHA256 of `data` under `key` (32 bytes).
    public static func hmacSHA256(key: [UInt8], _ data: some Collection<UInt8>) -> [UInt8] {
        let bytes = Array(data)
        var output = [UInt8](repeating: 0, count: 32)
        var size = 0
        let result = key.withUnsafeBytes { key in
            bytes.withUnsafeBytes { input in
                // An empty array may have no base address; HMAC of empty input or key is still defined,
                // so point at a valid byte and pass length 0.
                withUnsafeBytes(of: UInt8(0)) { empty in
                    EVP_Q_mac(
                        nil, "HMAC", nil, "SHA256", nil, key.baseAddress ?? empty.baseAddress, key.count,
                        (input.baseAddress ?? empty.baseAddress)?.assumingMemoryBound(to: UInt8.self), input.count, &output,
                        output.count, &size)
                }
            }
        }
        // As with EVP_Digest: failing here means a broken OpenSSL set-up, and a wrong MAC must never
        // be returned silently.
        precondition(result != nil && size == 32, "EVP_Q_mac failed: \(OpenSSLError.drainQueue())")
        return output
    }

    /// Whether two byte strings are equal, in time that depends only on their length (OpenSSL's
    /// `CRYPTO_memcmp`): comparing a secret's hash must not reveal how many leading bytes matched.
    public static func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard !lhs.isEmpty else { return true }
        return lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, left.count) == 0 }
        }
    }

    /// Lower-case hex without separators, e.g. `"e3b0c442…"`.
    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of hex text (either case); nil for an odd length or a non-hex digit.
    public static func unhex(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
        }
        return out
    }

    private static func digest(_ data: some Collection<UInt8>, _ type: OpaquePointer?, length: Int) -> [UInt8] {
        let bytes = Array(data)
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var size: UInt32 = 0
        let ok = bytes.withUnsafeBytes { input in
            // EVP_Digest only fails on allocation failure or a broken provider set-up; neither is
            // recoverable here, and a wrong digest must never be returned silently.
            EVP_Digest(input.baseAddress, input.count, &output, &size, type, nil)
        }
        precondition(ok == 1 && Int(size) == length, "EVP_Digest failed: \(OpenSSLError.drainQueue())")
        return Array(output.prefix(length))
    }
}

/// Cryptographically secure random bytes from OpenSSL's DRBG.
public enum SecureRandom {
    /// `count` random bytes (`RAND_bytes`).
    public static func bytes(_ count: Int) -> [UInt8] {
        guard count > 0 else { return [] }
        var output = [UInt8](repeating: 0, count: count)
        let ok = output.withUnsafeMutableBytes { RAND_bytes($0.baseAddress, Int32(clamping: $0.count)) }
        // Returning predictable bytes would be worse than stopping: this is the only safe failure.
        precondition(ok == 1 && count <= Int(Int32.max), "RAND_bytes failed: \(OpenSSLError.drainQueue())")
        return output
    }
}
