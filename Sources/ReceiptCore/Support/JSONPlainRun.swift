/// Where a run of bytes that JSON carries as they are ends: at the first quote, backslash or
/// control character. The JSON reader (its strings) and the writer (whether a string needs
/// escaping) both ask it, and the receipt's 5.6 KB of base64 is such a run in every job envelope
/// and every Apple answer.
enum JSONPlainRun {
    /// The index of the first quote, backslash or byte under 0x20 at or after `start`, or
    /// `bytes.count` when there is none. Eight bytes a step while a word holds none of them.
    static func end(of bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        // A byte of `x` is zero ⇔ its high bit is set in `(x − ones) & ~x & highs` (as a test of
        // "is any byte zero" it has no false positives); `x − 0x20…` flags bytes under 0x20 the
        // same way. A word that trips a test is then read byte by byte, which is exact.
        func hasZeroByte(_ x: UInt64) -> Bool { (x &- ones) & ~x & highs != 0 }
        let raw = UnsafeRawBufferPointer(bytes)
        var index = start
        while index + 8 <= bytes.count {
            let word = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            if hasZeroByte(word ^ (ones &* 0x22)) || hasZeroByte(word ^ (ones &* 0x5C)) || (word &- ones &* 0x20) & ~word & highs != 0 {
                for offset in index..<index + 8 where isSpecial(bytes[offset]) { return offset }
            }
            index += 8
        }
        while index < bytes.count, !isSpecial(bytes[index]) { index += 1 }
        return index
    }

    private static func isSpecial(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20
    }
}
