import Foundation

/// UUIDv7 identifiers: time-ordered, so receipt ids sort by arrival and index well in Postgres.
public enum JobID {
    /// A new UUIDv7 for the given instant.
    /// - Parameters:
    ///   - date: the instant encoded in the first 48 bits (milliseconds since 1970).
    ///   - generator: the randomness for the remaining 74 bits.
    public static func make(at date: Date, using generator: inout some RandomNumberGenerator) -> UUID {
        let ms = UInt64(max(0, date.timeIntervalSince1970 * 1000))
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: ms >> (8 * (5 - i))) }
        for i in 6..<16 { bytes[i] = UInt8.random(in: 0...255, using: &generator) }
        bytes[6] = (bytes[6] & 0x0F) | 0x70  // version 7
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 4122 variant
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }

    /// A new UUIDv7 for `date` using the system's random number generator.
    public static func make(at date: Date = Date()) -> UUID {
        var rng = SystemRandomNumberGenerator()
        return make(at: date, using: &rng)
    }
}
