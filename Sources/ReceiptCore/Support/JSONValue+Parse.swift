import Foundation

/// A JSON text that ``JSONValue/parse(_:)`` refuses: where, and why (a bounded code).
public struct JSONParseError: Error, Sendable, Equatable {
    /// Bounded codes: `syntax`, `depth`, `string`, `number`, `duplicate_key`, `trailing`.
    public var code: String
    /// The byte offset where parsing stopped.
    public var offset: Int

    /// Creates an error.
    public init(code: String, offset: Int) {
        self.code = code
        self.offset = offset
    }
}

extension JSONValue {
    /// An answer from Apple's HTTP APIs: the one-pass reader first (workers read every answer),
    /// and a text it is stricter about (a duplicate key, `0e1`) still read as `JSONDecoder` reads
    /// it. Not for signed payloads, which must not be ambiguous: use ``parse(_:)``.
    public static func parseAnswer(_ bytes: [UInt8]) -> JSONValue? { parseLeniently(bytes) }

    /// Any JSON text as the project always read it: the one-pass reader first, and a text it is
    /// stricter about (a duplicate key, a lone surrogate escape) as `JSONDecoder` reads it. For
    /// clients' bodies and Apple's answers; never for signed payloads (use ``parse(_:)``).
    public static func parseLeniently(_ bytes: some Collection<UInt8>) -> JSONValue? {
        if let value = try? parse(bytes) { return value }
        return try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))
    }

    /// The deepest nesting ``parse(_:)`` follows: Apple's payloads are three levels deep.
    public static let maximumParseDepth = 128

    /// Parses a JSON text (RFC 8259) in one pass over its bytes.
    ///
    /// `JSONDecoder` reaches a ``JSONValue`` by trying each type in turn, and every miss throws and
    /// builds an error: decoding one StoreKit 2 payload cost more than checking its ECDSA signature.
    /// This reader is strict where a signed payload must not be ambiguous: a duplicate key, a lone
    /// surrogate, invalid UTF-8, a number outside `Double`, or anything after the value is refused.
    /// Whatever it accepts, `JSONDecoder` decodes to the same value (the fuzz target checks that).
    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        let input = Array(bytes)
        return try input.withUnsafeBufferPointer { buffer throws(JSONParseError) -> JSONValue in
            var parser = JSONByteParser(bytes: buffer)
            parser.skipWhitespace()
            let value = try parser.value(depth: 0)
            parser.skipWhitespace()
            guard parser.index == buffer.count else { throw JSONParseError(code: "trailing", offset: parser.index) }
            return value
        }
    }
}

private struct JSONByteParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    /// The members read so far of the objects open, innermost last. An object's dictionary is
    /// made once with room for all its members: growing it as they came rehashed every key at 2, 4,
    /// 8 and 16 members, and an Apple answer's purchases have twenty.
    var members: [(key: String, keyStart: Int, value: JSONValue)] = []

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    func fail(_ code: String) -> JSONParseError { JSONParseError(code: code, offset: index) }

    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func skipWhitespace() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
            index += 1
        }
    }

    mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < JSONValue.maximumParseDepth else { throw fail("depth") }
        switch current {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        case .some(let byte) where byte == UInt8(ascii: "-") || (0x30...0x39).contains(byte): return .number(try number())
        default: throw fail("syntax")
        }
    }

    mutating func literal(_ word: StaticString, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw fail("syntax") }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { throw fail("syntax") }
        index += count
        return value
    }

    mutating func object(depth: Int) throws(JSONParseError) -> JSONValue {
        index += 1
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            return .object([:])
        }
        let first = members.count
        defer { members.removeSubrange(first...) }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw fail("syntax") }
            let keyStart = index
            let key = try string()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw fail("syntax") }
            index += 1
            skipWhitespace()
            let value = try value(depth: depth + 1)
            members.append((key, keyStart, value))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                var object = [String: JSONValue](minimumCapacity: members.count - first)
                for member in members[first...] {
                    guard object.updateValue(member.value, forKey: member.key) == nil else {
                        throw JSONParseError(code: "duplicate_key", offset: member.keyStart)
                    }
                }
                return .object(object)
            default: throw fail("syntax")
            }
        }
    }

    mutating func array(depth: Int) throws(JSONParseError) -> JSONValue {
        index += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try value(depth: depth + 1))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                return .array(items)
            default: throw fail("syntax")
            }
        }
    }

    /// A string starting at the opening quote; the bytes must be valid UTF-8 without raw control
    /// characters, and every `\u` escape a scalar (surrogates only in pairs).
    mutating func string() throws(JSONParseError) -> String {
        index += 1
        let start = index
        // The common case, no escape: one validated copy.
        index = JSONPlainRun.end(of: bytes, from: index)
        guard index < bytes.count, bytes[index] >= 0x20 else { throw fail("string") }
        if bytes[index] == UInt8(ascii: "\"") {
            // No escape: validated straight from the input (no intermediate array; a short string
            // needs no allocation at all). An Apple answer is mostly keys and short values.
            index += 1
            guard let text = String(wellFormedUTF8: UnsafeBufferPointer(rebasing: bytes[start..<index - 1])) else {
                throw JSONParseError(code: "string", offset: start)
            }
            return text
        }
        var raw = Array(bytes[start..<index])
        while bytes[index] == UInt8(ascii: "\\") {
            index += 1
            guard let escape = current else { throw fail("string") }
            index += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): raw.append(escape)
            case UInt8(ascii: "b"): raw.append(0x08)
            case UInt8(ascii: "f"): raw.append(0x0C)
            case UInt8(ascii: "n"): raw.append(0x0A)
            case UInt8(ascii: "r"): raw.append(0x0D)
            case UInt8(ascii: "t"): raw.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                        throw fail("string")
                    }
                    index += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fail("string") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw fail("string")
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw fail("string") }
                raw.append(contentsOf: UTF8.encode(unicode)!)
            default: throw fail("string")
            }
            let runStart = index
            index = JSONPlainRun.end(of: bytes, from: index)
            raw.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
            guard index < bytes.count, bytes[index] >= 0x20 else { throw fail("string") }
        }
        index += 1
        guard let text = String(wellFormedUTF8: raw[...]) else { throw JSONParseError(code: "string", offset: start) }
        return text
    }

    mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw fail("string") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case 0x30...0x39: digit = UInt32(byte - 0x30)
            case 0x41...0x46: digit = UInt32(byte - 0x41 + 10)
            case 0x61...0x66: digit = UInt32(byte - 0x61 + 10)
            default: throw fail("string")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    /// RFC 8259's number grammar, converted by the standard library; a number `Double` cannot
    /// hold (overflow to infinity) is refused rather than silently changed.
    mutating func number() throws(JSONParseError) -> Double {
        let start = index
        func digits() -> Int {
            let from = index
            while index < bytes.count, (0x30...0x39).contains(bytes[index]) { index += 1 }
            return index - from
        }
        if current == UInt8(ascii: "-") { index += 1 }
        let leadingZero = current == UInt8(ascii: "0")
        if leadingZero {
            index += 1
        } else {
            guard digits() > 0 else { throw fail("number") }
        }
        var fraction = false
        if current == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw fail("number") }
            fraction = true
        }
        // `0e1` is RFC 8259 JSON, but Foundation's JSONDecoder refuses it: refused here too, so
        // that no text is read by one of receiptq's readers and refused by the other.
        if leadingZero, !fraction, current == UInt8(ascii: "e") || current == UInt8(ascii: "E") { throw fail("number") }
        let exponent = current == UInt8(ascii: "e") || current == UInt8(ascii: "E")
        if exponent {
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw fail("number") }
        }
        guard let value = Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)), value.isFinite
        else { throw JSONParseError(code: "number", offset: start) }
        // A non-zero number too small for a Double (`5e-515`) reads as 0 here but is refused by
        // JSONDecoder (an underflow): refused here too, for the same reason as `0e1` above.
        if value == 0 {
            let significand = bytes[start..<index].prefix { $0 != UInt8(ascii: "e") && $0 != UInt8(ascii: "E") }
            if significand.contains(where: { $0 >= UInt8(ascii: "1") && $0 <= UInt8(ascii: "9") }) {
                throw JSONParseError(code: "number", offset: start)
            }
            // Foundation also refuses some zeros with an exponent (`0.00e3`, `0.00e-3`, yet not
            // `0.0e3` or `0.00e0`): too rare in any real document to model, so it decides them.
            if exponent, (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes[start..<index]))) == nil {
                throw JSONParseError(code: "number", offset: start)
            }
        }
        return value
    }
}
