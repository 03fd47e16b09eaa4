/// A hash of bytes that is the same in every process and run (Swift's `Hasher` is seeded per
/// process): 128-bit FNV-1a. Not a security hash: it tells apart values receiptq itself chose to
/// compare (poison members of a job set, the claimants of one idempotency key), never an
/// attacker's attempt to collide.
public enum StableHash {
    /// The 128-bit FNV-1a hash of `bytes`.
    public static func fnv1a128<Bytes: Sequence>(_ bytes: Bytes) -> UInt128 where Bytes.Element == UInt8 {
        var hash: UInt128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d
        let prime: UInt128 = 0x0000_0000_0100_0000_0000_0000_0000_013b
        for byte in bytes {
            hash ^= UInt128(byte)
            hash = hash &* prime
        }
        return hash
    }

    /// ``fnv1a128(_:)`` as 32 lowercase hex digits.
    public static func hex<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let hex = String(fnv1a128(bytes), radix: 16)
        return String(repeating: "0", count: 32 - hex.count) + hex
    }
}
