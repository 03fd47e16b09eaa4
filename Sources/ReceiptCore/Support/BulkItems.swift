/// The items of a bulk request body, as byte ranges of the body: a JSON array's elements, or
/// the non-blank lines of NDJSON. Each item is parsed and judged on its own, so one bad item is
/// that item's 422, not the batch's.
public enum BulkItems {
    /// The elements of the JSON array `bytes` holds (whitespace around each trimmed), or nil when
    /// the text is not one array: unbalanced brackets or quotes, or anything after it. What is
    /// inside an element is not checked here (its parser does that).
    public static func arrayElements(_ bytes: [UInt8]) -> [Range<Int>]? {
        bytes.withUnsafeBufferPointer { bytes -> [Range<Int>]? in
            func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }
            var index = 0
            while index < bytes.count, isBlank(bytes[index]) { index += 1 }
            guard index < bytes.count, bytes[index] == UInt8(ascii: "[") else { return nil }
            index += 1
            var elements: [Range<Int>] = []
            var depth = 0
            var start: Int?
            var last = index
            var closed = false
            while index < bytes.count, !closed {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    if start == nil { start = index }
                    index += 1
                    while index < bytes.count, bytes[index] != UInt8(ascii: "\"") { index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1 }
                    guard index < bytes.count else { return nil }
                    last = index + 1
                case UInt8(ascii: "["), UInt8(ascii: "{"):
                    if start == nil { start = index }
                    depth += 1
                    last = index + 1
                case UInt8(ascii: "]") where depth == 0:
                    if let start { elements.append(start..<last) } else if !elements.isEmpty { return nil }  // `[1,]`
                    closed = true
                case UInt8(ascii: "]"), UInt8(ascii: "}"):
                    guard depth > 0 else { return nil }
                    depth -= 1
                    last = index + 1
                case UInt8(ascii: ",") where depth == 0:
                    guard let begun = start else { return nil }  // `[,1]`, `[1,,2]`
                    elements.append(begun..<last)
                    start = nil
                case _ where isBlank(byte):
                    break
                default:
                    if start == nil { start = index }
                    last = index + 1
                }
                index += 1
            }
            guard closed, depth == 0 else { return nil }
            while index < bytes.count, isBlank(bytes[index]) { index += 1 }
            return index == bytes.count ? elements : nil
        }
    }

    /// The lines of an NDJSON text that hold something, with their 1-based numbers (a line ends
    /// at `\n`; a `\r` before it is dropped).
    public static func lines(_ bytes: [UInt8]) -> [(number: Int, range: Range<Int>)] {
        var lines: [(number: Int, range: Range<Int>)] = []
        var start = 0
        var number = 1
        func add(_ end: Int) {
            var low = start
            var high = end
            while low < high, bytes[low] == 0x20 || bytes[low] == 0x09 || bytes[low] == 0x0D { low += 1 }
            while high > low, bytes[high - 1] == 0x20 || bytes[high - 1] == 0x09 || bytes[high - 1] == 0x0D { high -= 1 }
            if low < high { lines.append((number, low..<high)) }
        }
        for (index, byte) in bytes.enumerated() where byte == 0x0A {
            add(index)
            start = index + 1
            number += 1
        }
        add(bytes.count)
        return lines
    }

    /// The RFC 4180 fields of one CSV line: separated by commas, optionally quoted (`""` is a
    /// quote), blanks around each trimmed; nil when a quote is left open (a field spanning lines
    /// is not supported: one line is one item).
    public static func csvFields(_ line: ArraySlice<UInt8>) -> [String]? {
        var fields: [String] = []
        var field: [UInt8] = []
        var quoted = false
        var index = line.startIndex
        var atStart = true
        while index < line.endIndex {
            let byte = line[index]
            if quoted {
                if byte == UInt8(ascii: "\"") {
                    if index + 1 < line.endIndex, line[index + 1] == UInt8(ascii: "\"") {
                        field.append(byte)
                        index += 1
                    } else {
                        quoted = false
                    }
                } else {
                    field.append(byte)
                }
            } else if byte == UInt8(ascii: ",") {
                fields.append(String(decoding: trimmedBlanks(field[...]), as: UTF8.self))
                field = []
                atStart = true
                index += 1
                continue
            } else if byte == UInt8(ascii: "\""), atStart {
                quoted = true
                field = []
            } else {
                field.append(byte)
            }
            // Blanks before an opening quote are allowed (`a, "b, c"`): only a visible byte ends the start.
            if byte != 0x20, byte != 0x09 { atStart = false }
            index += 1
        }
        guard !quoted else { return nil }
        fields.append(String(decoding: trimmedBlanks(field[...]), as: UTF8.self))
        return fields
    }

    /// `bytes` without the spaces, tabs and carriage returns around it.
    public static func trimmedBlanks(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var low = bytes.startIndex
        var high = bytes.endIndex
        while low < high, bytes[low] == 0x20 || bytes[low] == 0x09 || bytes[low] == 0x0D { low += 1 }
        while high > low, bytes[high - 1] == 0x20 || bytes[high - 1] == 0x09 || bytes[high - 1] == 0x0D { high -= 1 }
        return bytes[low..<high]
    }
}
