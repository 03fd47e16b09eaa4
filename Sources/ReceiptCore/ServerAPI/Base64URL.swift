/// Base64url without padding (RFC 4648 §5), as JOSE writes every segment.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    /// Encodes `bytes` (no padding).
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            for shift in [18, 12, 6, 0] { output.append(alphabet[Int(value >> UInt32(shift) & 63)]) }
            index += 3
        }
        let rest = input.count - index
        if rest > 0 {
            let value = UInt32(input[index]) << 16 | (rest == 2 ? UInt32(input[index + 1]) << 8 : 0)
            output.append(alphabet[Int(value >> 18 & 63)])
            output.append(alphabet[Int(value >> 12 & 63)])
            if rest == 2 { output.append(alphabet[Int(value >> 6 & 63)]) }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes unpadded base64url (trailing `=` padding is tolerated).
    /// - Returns: nil for a character outside the alphabet, an impossible length (one character
    ///   left over), or non-zero bits in the last character's unused part (a non-canonical form,
    ///   which would let two texts carry one signature).
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        // One contiguous copy, then a loop the compiler specializes: a generic walk over another
        // module's UTF8View costs a witness-table call per character.
        var string = String(text)
        return string.withUTF8 { decode(bytes: $0) }
    }

    /// Decodes unpadded base64url given as its UTF-8 bytes (see ``decode(_:)``).
    public static func decode(bytes: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var count = bytes.count
        while count > 0, bytes[count - 1] == UInt8(ascii: "=") { count -= 1 }
        let characters = UnsafeBufferPointer(rebasing: bytes[0..<count])
        guard characters.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(characters.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        let values = Self.values
        for character in characters {
            let value = values[Int(character)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        guard accumulator == 0 else { return nil }
        return output
    }
}
