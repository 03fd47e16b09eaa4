internal import COpenSSL
import Foundation

/// Operators' passwords, stored as scrypt hashes (RFC 7914, OpenSSL's `EVP_PBE_scrypt`) in the
/// PHC string format: `$scrypt$ln=15,r=8,p=1$<salt>$<hash>` (base64 without padding).
///
/// scrypt is memory-hard: at the default cost (N = 2¹⁵, r = 8: 32 MiB and ~0.1 s per try) a stolen
/// table costs an attacker the same per guess on a GPU as on this server. The parameters travel in
/// the string, so raising the cost later leaves old hashes verifiable.
public enum PasswordHash {
    /// The cost of new hashes: log₂ N, r, p.
    public struct Cost: Sendable, Equatable {
        public var logN: Int
        public var r: Int
        public var p: Int

        /// OWASP's scrypt recommendation: N = 2¹⁵, r = 8, p = 1.
        public static let standard = Cost(logN: 15, r: 8, p: 1)
        /// For tests only: fast, and far too weak for a real password.
        public static let testing = Cost(logN: 10, r: 8, p: 1)

        /// Creates a cost.
        public init(logN: Int, r: Int, p: Int) {
            self.logN = logN
            self.r = r
            self.p = p
        }

        /// Whether verifying costs a bounded amount: a stored string must not make a login take a
        /// gigabyte or a minute.
        var isBounded: Bool { (10...20).contains(logN) && (1...16).contains(r) && (1...4).contains(p) }
    }

    /// A new hash of `password` with a random 16-byte salt.
    public static func hash(_ password: String, cost: Cost = .standard) -> String {
        let salt = SecureRandom.bytes(16)
        let key = derive(Array(password.utf8), salt: salt, cost: cost)
        return "$scrypt$ln=\(cost.logN),r=\(cost.r),p=\(cost.p)$\(encode(salt))$\(encode(key!))"
    }

    /// Whether `password` is the one `stored` was made from (constant-time comparison). False for
    /// a string that is not a bounded scrypt hash.
    public static func verify(_ password: String, against stored: String) -> Bool {
        let parts = stored.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "scrypt" else { return false }
        var values: [Substring: Int] = [:]
        for item in parts[2].split(separator: ",") {
            let pair = item.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, let value = Int(pair[1]) else { return false }
            values[pair[0]] = value
        }
        guard let logN = values["ln"], let r = values["r"], let p = values["p"] else { return false }
        let cost = Cost(logN: logN, r: r, p: p)
        guard cost.isBounded, let salt = decode(parts[3]), let expected = decode(parts[4]), (16...64).contains(expected.count),
            let key = derive(Array(password.utf8), salt: salt, cost: cost, length: expected.count)
        else { return false }
        return Digest.constantTimeEqual(key, expected)
    }

    /// Whether `stored` was made at a lower cost than `cost` (worth re-hashing at the next login).
    public static func needsRehash(_ stored: String, cost: Cost = .standard) -> Bool {
        !stored.hasPrefix("$scrypt$ln=\(cost.logN),r=\(cost.r),p=\(cost.p)$")
    }

    private static func derive(_ password: [UInt8], salt: [UInt8], cost: Cost, length: Int = 32) -> [UInt8]? {
        guard cost.isBounded else { return nil }
        var key = [UInt8](repeating: 0, count: length)
        // scrypt needs 128·N·r bytes (plus a little); OpenSSL refuses to go past maxmem.
        let maxMemory = UInt64(128 << cost.logN) * UInt64(cost.r) + (1 << 20) * UInt64(cost.p)
        // An empty password has no buffer; scrypt of it is still defined (a NUL byte, length 0).
        let bytes = password.map { CChar(bitPattern: $0) } + [0]
        let ok = bytes.withUnsafeBufferPointer { password in
            salt.withUnsafeBufferPointer { salt in
                EVP_PBE_scrypt(
                    password.baseAddress, bytes.count - 1, salt.baseAddress, salt.count, 1 << UInt64(cost.logN), UInt64(cost.r),
                    UInt64(cost.p), maxMemory * 2, &key, key.count)
            }
        }
        guard ok == 1 else {
            _ = OpenSSLError.drainQueue()
            return nil
        }
        return key
    }

    private static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "=", with: "")
    }

    private static func decode(_ text: Substring) -> [UInt8]? {
        guard text.utf8.count <= 128 else { return nil }
        let padded = String(text) + String(repeating: "=", count: (4 - text.utf8.count % 4) % 4)
        return Data(base64Encoded: padded).map(Array.init)
    }
}
