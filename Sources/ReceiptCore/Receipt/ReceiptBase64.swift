/// Base64 as receipts arrive in practice: through query strings, form posts, mail and JSON.
enum ReceiptBase64 {
    /// Value of each alphabet byte (standard and URL-safe), 0xFF for anything else.
    private static let table: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        table[Int(UInt8(ascii: "+"))] = 62
        table[Int(UInt8(ascii: "-"))] = 62
        table[Int(UInt8(ascii: "/"))] = 63
        table[Int(UInt8(ascii: "_"))] = 63
        // A form-decoded query string turns '+' into ' '; a space is never whitespace in a base64 receipt.
        table[Int(UInt8(ascii: " "))] = 62
        return table
    }()

    /// Value of each byte of the standard alphabet, 0xFF for anything else (the URL-safe pair and
    /// the space included): what a canonical text may hold before its padding.
    private static let standardTable: [UInt8] = {
        var standard = table
        for byte in ["-", "_", " "] { standard[Int(UInt8(ascii: Unicode.Scalar(byte)!))] = 0xFF }
        return standard
    }()

    /// Whether `text` is exactly what standard padded base64 of `decodedCount` bytes looks like
    /// (the standard alphabet, no blanks, `=` padding, the last sextet's unused bits zero), given
    /// that it decoded to that many bytes: then encoding the bytes again gives `text` back, and the
    /// ingest API keeps the text instead of making a second copy.
    static func isCanonical(_ text: String, decodedCount: Int) -> Bool {
        let check = { (utf8: UnsafeBufferPointer<UInt8>) -> Bool in
            guard decodedCount > 0, utf8.count == (decodedCount + 2) / 3 * 4 else { return false }
            let padding = (3 - decodedCount % 3) % 3
            let data = utf8.count - padding
            // One table look-up a byte, not five range tests: the ingest API checks every receipt.
            let standard = standardTable.withUnsafeBufferPointer { standard in
                var seen: UInt8 = 0
                for index in 0..<data { seen |= standard[Int(utf8[index])] }
                return seen & 0xC0 == 0
            }
            guard standard else { return false }
            for index in data..<utf8.count where utf8[index] != UInt8(ascii: "=") { return false }
            guard padding > 0 else { return true }
            // One byte short: the last sextet holds 2 unused bits; two short: 4.
            let unusedBits: UInt8 = padding == 1 ? 0b11 : 0b1111
            return table.withUnsafeBufferPointer { $0[Int(utf8[data - 1])] } & unusedBits == 0
        }
        return text.utf8.withContiguousStorageIfAvailable(check) ?? Array(text.utf8).withUnsafeBufferPointer(check)
    }

    static func decode(_ text: String) -> [UInt8]? {
        // Native strings are contiguous UTF-8: decode in place. Bridged ones are copied first.
        if let result = text.utf8.withContiguousStorageIfAvailable({ decode(utf8: $0) }) { return result }
        return Array(text.utf8).withUnsafeBufferPointer { decode(utf8: $0) }
    }

    /// One pass over the UTF-8 bytes, with the table and the output reached through buffers (the
    /// table's lazy initialisation is checked once per call, not once per character).
    private static func decode(utf8 input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        table.withUnsafeBufferPointer { table -> [UInt8]? in
            var valid = true
            // Each 4 sextets give 3 bytes; at most 3 sextets are left over, giving at most 2 bytes.
            let output = [UInt8](unsafeUninitializedCapacity: input.count / 4 * 3 + 3) { out, initialized in
                var written = 0
                var accumulator: UInt32 = 0
                var count = 0
                var padding = 0
                var index = 0
                while index < input.count {
                    // Four sextets at once while nothing needs a decision (no blank, no padding,
                    // no byte outside the alphabet): nearly the whole of every receipt.
                    if count == 0, padding == 0, input.count - index >= 4 {
                        let (a, b, c, d) = (
                            table[Int(input[index])], table[Int(input[index + 1])], table[Int(input[index + 2])],
                            table[Int(input[index + 3])]
                        )
                        if (a | b | c | d) & 0xC0 == 0 {
                            let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                            out[written] = UInt8(truncatingIfNeeded: group >> 16)
                            out[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                            out[written + 2] = UInt8(truncatingIfNeeded: group)
                            written += 3
                            index += 4
                            continue
                        }
                    }
                    let byte = input[index]
                    index += 1
                    switch byte {
                    case UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"):
                        continue
                    case UInt8(ascii: "="):
                        padding += 1
                        continue
                    case UInt8(ascii: " ") where padding > 0:
                        // Trailing blanks after the padding: nothing to restore.
                        continue
                    default:
                        break
                    }
                    let value = table[Int(byte)]
                    // Data after padding means two receipts glued together, or garbage.
                    guard padding == 0, value != 0xFF else {
                        valid = false
                        break
                    }
                    accumulator = accumulator << 6 | UInt32(value)
                    count += 1
                    if count == 4 {
                        out[written] = UInt8(truncatingIfNeeded: accumulator >> 16)
                        out[written + 1] = UInt8(truncatingIfNeeded: accumulator >> 8)
                        out[written + 2] = UInt8(truncatingIfNeeded: accumulator)
                        written += 3
                        accumulator = 0
                        count = 0
                    }
                }
                switch (valid && padding <= 2, count) {
                case (false, _):
                    valid = false
                case (true, 0):
                    valid = padding == 0
                case (true, 2):
                    out[written] = UInt8(truncatingIfNeeded: accumulator >> 4)
                    written += 1
                case (true, 3):
                    out[written] = UInt8(truncatingIfNeeded: accumulator >> 10)
                    out[written + 1] = UInt8(truncatingIfNeeded: accumulator >> 2)
                    written += 2
                default:
                    // One leftover sextet cannot encode a byte.
                    valid = false
                }
                initialized = written
            }
            return valid ? output : nil
        }
    }
}
