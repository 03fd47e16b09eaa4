/// A small parser and writer for NeXTSTEP ("old-style") property lists, the text format of iOS 6
/// transaction receipts: `{ "key" = "value"; key2 = value2; }`.
///
/// Strict where ambiguity could hide a forgery (duplicate keys, trailing garbage), tolerant where
/// Apple's own output varies (a missing final `;`, unquoted tokens, comments, a trailing NUL).
enum OldStylePlist {
    indirect enum Value: Equatable {
        case string(String)
        case dictionary([String: Value])
        case array([Value])
        case data([UInt8])
    }

    struct ParseError: Error {}

    /// Nesting bound, so hostile input cannot exhaust the stack.
    private static let maximumDepth = 16

    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D || byte == 0x0C || byte == 0x0B
    }

    /// Parses a plist whose root is a dictionary of strings; nested values are skipped.
    static func parseStringDictionary(_ bytes: [UInt8]) throws(ParseError) -> [String: String] {
        guard case .dictionary(let dictionary) = try parse(bytes) else { throw ParseError() }
        var strings: [String: String] = [:]
        for (key, value) in dictionary {
            if case .string(let text) = value { strings[key] = text }
        }
        return strings
    }

    static func parse(_ bytes: [UInt8]) throws(ParseError) -> Value {
        var parser = Parser(bytes: bytes)
        let value = try parser.value(depth: 0)
        parser.skipTrivia()
        // A C string's NUL terminator sometimes travels with the text.
        while parser.index < bytes.count, bytes[parser.index] == 0 { parser.index += 1 }
        guard parser.index == bytes.count else { throw ParseError() }
        return value
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        mutating func skipTrivia() {
            while index < bytes.count {
                let byte = bytes[index]
                if OldStylePlist.isWhitespace(byte) {
                    index += 1
                } else if byte == UInt8(ascii: "/"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "/") {
                    while index < bytes.count, bytes[index] != 0x0A { index += 1 }
                } else if byte == UInt8(ascii: "/"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "*") {
                    index += 2
                    while index + 1 < bytes.count, !(bytes[index] == UInt8(ascii: "*") && bytes[index + 1] == UInt8(ascii: "/")) {
                        index += 1
                    }
                    index = min(index + 2, bytes.count)
                } else {
                    return
                }
            }
        }

        mutating func value(depth: Int) throws(ParseError) -> Value {
            guard depth <= OldStylePlist.maximumDepth else { throw ParseError() }
            skipTrivia()
            guard index < bytes.count else { throw ParseError() }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                index += 1
                return .dictionary(try dictionary(depth: depth))
            case UInt8(ascii: "("):
                index += 1
                return .array(try array(depth: depth))
            case UInt8(ascii: "<"):
                index += 1
                return .data(try data())
            default:
                return .string(try string())
            }
        }

        mutating func dictionary(depth: Int) throws(ParseError) -> [String: Value] {
            var result: [String: Value] = [:]
            while true {
                skipTrivia()
                guard index < bytes.count else { throw ParseError() }
                if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return result
                }
                let key = try string()
                skipTrivia()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else { throw ParseError() }
                index += 1
                let item = try value(depth: depth + 1)
                // Two values for one key: different readers would pick different ones.
                guard result.updateValue(item, forKey: key) == nil else { throw ParseError() }
                skipTrivia()
                guard index < bytes.count else { throw ParseError() }
                if bytes[index] == UInt8(ascii: ";") {
                    index += 1
                } else if bytes[index] != UInt8(ascii: "}") {
                    throw ParseError()
                }
            }
        }

        mutating func array(depth: Int) throws(ParseError) -> [Value] {
            var result: [Value] = []
            while true {
                skipTrivia()
                guard index < bytes.count else { throw ParseError() }
                if bytes[index] == UInt8(ascii: ")") {
                    index += 1
                    return result
                }
                result.append(try value(depth: depth + 1))
                skipTrivia()
                guard index < bytes.count else { throw ParseError() }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] != UInt8(ascii: ")") {
                    throw ParseError()
                }
            }
        }

        mutating func data() throws(ParseError) -> [UInt8] {
            var result: [UInt8] = []
            var high: UInt8?
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: ">") {
                    guard high == nil else { throw ParseError() }
                    return result
                }
                if OldStylePlist.isWhitespace(byte) { continue }
                guard let nibble = OldStylePlist.hexValue(byte) else { throw ParseError() }
                if let first = high {
                    result.append(first << 4 | nibble)
                    high = nil
                } else {
                    high = nibble
                }
            }
            throw ParseError()
        }

        mutating func string() throws(ParseError) -> String {
            guard index < bytes.count else { throw ParseError() }
            let quote = bytes[index]
            guard quote == UInt8(ascii: "\"") || quote == UInt8(ascii: "'") else { return try unquoted() }
            index += 1
            var output: [UInt8] = []
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                if byte == quote {
                    guard let text = String(validating: output, as: UTF8.self) else { throw ParseError() }
                    return text
                }
                guard byte == UInt8(ascii: "\\") else {
                    output.append(byte)
                    continue
                }
                guard index < bytes.count else { throw ParseError() }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "n"): output.append(0x0A)
                case UInt8(ascii: "t"): output.append(0x09)
                case UInt8(ascii: "r"): output.append(0x0D)
                case UInt8(ascii: "a"): output.append(0x07)
                case UInt8(ascii: "b"): output.append(0x08)
                case UInt8(ascii: "f"): output.append(0x0C)
                case UInt8(ascii: "v"): output.append(0x0B)
                case UInt8(ascii: "U"), UInt8(ascii: "u"):
                    var scalar: UInt32 = 0
                    for _ in 0..<4 {
                        guard index < bytes.count, let nibble = OldStylePlist.hexValue(bytes[index]) else {
                            throw ParseError()
                        }
                        scalar = scalar << 4 | UInt32(nibble)
                        index += 1
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw ParseError() }
                    output += Array(String(Character(unicode)).utf8)
                case UInt8(ascii: "0")...UInt8(ascii: "7"):
                    var code = UInt32(escaped - 0x30)
                    for _ in 0..<2 {
                        guard index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x37 else { break }
                        code = code << 3 | UInt32(bytes[index] - 0x30)
                        index += 1
                    }
                    guard code <= 0xFF else { throw ParseError() }
                    output.append(UInt8(code))
                default:
                    // `\"`, `\\`, `\'` and any other character stand for themselves.
                    output.append(escaped)
                }
            }
            throw ParseError()
        }

        mutating func unquoted() throws(ParseError) -> String {
            let start = index
            while index < bytes.count, OldStylePlist.isUnquotedCharacter(bytes[index]) { index += 1 }
            guard index > start else { throw ParseError() }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    static func isUnquotedCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "_"), UInt8(ascii: "$"), UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: ":"),
            UInt8(ascii: "."), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// Writes a dictionary of strings the way Apple lays out transaction receipts: one quoted
    /// `"key" = "value";` per line, tab-indented, in the given key order.
    static func write(_ entries: [(key: String, value: String)]) -> [UInt8] {
        var output = Array("{\n".utf8)
        for (key, value) in entries {
            output.append(0x09)
            output += quoted(key)
            output += Array(" = ".utf8)
            output += quoted(value)
            output += Array(";\n".utf8)
        }
        output += Array("}".utf8)
        return output
    }

    private static func quoted(_ text: String) -> [UInt8] {
        var output: [UInt8] = [UInt8(ascii: "\"")]
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                output += [UInt8(ascii: "\\"), byte]
            case 0x0A:
                output += Array("\\n".utf8)
            case 0x09:
                output += Array("\\t".utf8)
            case 0x0D:
                output += Array("\\r".utf8)
            default:
                output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
        return output
    }
}
