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
                for byte in input {
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
