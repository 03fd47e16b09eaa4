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
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var count = 0
        var padding = 0
        for byte in text.utf8 {
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
            // Data after padding means two receipts glued together, or garbage.
            guard padding == 0 else { return nil }
            let value = table[Int(byte)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            count += 1
            if count == 4 {
                output.append(UInt8(truncatingIfNeeded: accumulator >> 16))
                output.append(UInt8(truncatingIfNeeded: accumulator >> 8))
                output.append(UInt8(truncatingIfNeeded: accumulator))
                accumulator = 0
                count = 0
            }
        }
        guard padding <= 2 else { return nil }
        switch count {
        case 0:
            guard padding == 0 else { return nil }
        case 2:
            output.append(UInt8(truncatingIfNeeded: accumulator >> 4))
        case 3:
            output.append(UInt8(truncatingIfNeeded: accumulator >> 10))
            output.append(UInt8(truncatingIfNeeded: accumulator >> 2))
        default:
            // One leftover sextet cannot encode a byte.
            return nil
        }
        return output
    }
}
