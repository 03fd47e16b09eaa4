import Foundation
import ReceiptCore
import Testing

/// The one-pass JSON reader: the same values as JSONDecoder, stricter where a signed payload must
/// not be ambiguous.
@Suite("JSONValue.parse")
struct JSONParseTests {
    @Test(
        "Reads what JSONDecoder reads, to the same value",
        arguments: [
            #"{"a":1,"b":[true,false,null],"c":{"d":"e"},"f":-0.5e-3,"g":12345678901234567890,"h":""}"#,
            #" [ 1 , 2.5 , -3 , 4E2 , "x" ] "#, #""tab\tquote\"slash\/back\\ unicode\u00e9 \ud83d\ude00 raw é 😀""#,
            "0", "-0", "0.0e1", "0.00e0", "10e1", "3e-324", "1e-320", "0.0e-999", "true", "null", #"{"":{"":[]}}"#, "[[[[[[]]]]]]",
            #"{"n":1.7976931348623157e308}"#,
        ])
    func agreesWithJSONDecoder(text: String) throws {
        let parsed = try JSONValue.parse(Array(text.utf8))
        #expect(parsed == (try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))))
    }

    @Test(
        "Refuses with a bounded code: syntax, strings, numbers, duplicates, depth, trailing bytes",
        arguments: [
            ("", "syntax"), ("{", "syntax"), (#"{"a" 1}"#, "syntax"), ("[1,]", "syntax"), ("{,}", "syntax"), ("tru", "syntax"),
            ("'a'", "syntax"), ("NaN", "syntax"), ("01", "trailing"), ("1.", "number"), ("-", "number"), ("1e", "number"),
            ("1e400", "number"), ("5e-515", "number"), ("-2e-324", "number"), ("0.000001e-320", "number"), ("0e1", "number"), ("-0E1", "number"),
            ("0.00e3", "number"), ("-0.00e1", "number"), ("0.00e-3", "number"),
            ("[1] x", "trailing"), (#"{"a":1,"a":2}"#, "duplicate_key"),
            ("\"a\u{1}b\"", "string"),
            (#""\ud800""#, "string"), (#""\udc00""#, "string"), (#""\ud800\u0041""#, "string"), (#""\x""#, "string"),
            (#""\u12"#, "string"), ("\"abc", "string"),
        ])
    func refuses(text: String, code: String) {
        #expect(throws: JSONParseError.self) { try JSONValue.parse(Array(text.utf8)) }
        do {
            _ = try JSONValue.parse(Array(text.utf8))
        } catch {
            #expect(error.code == code, "\(text)")
        }
    }

    @Test("Invalid UTF-8 inside a string and nesting past the limit are refused, never a crash")
    func hostile() {
        #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0xC0, 0x80, 0x22]) }
        #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0xED, 0xA0, 0x80, 0x22]) }
        let deep = Array(repeating: UInt8(ascii: "["), count: 100_000)
        #expect(throws: JSONParseError(code: "depth", offset: JSONValue.maximumParseDepth)) { try JSONValue.parse(deep) }
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect((try? JSONValue.parse(Array(fine.utf8))) != nil)
    }

    @Test("A string's bytes are taken exactly when they are well-formed UTF-8, as String(validating:) judges them")
    func stringsAreValidatedLikeTheStandardLibrary() throws {
        // Ill-formed on purpose: a lone continuation byte, an overlong form, an encoded surrogate,
        // a code point past U+10FFFF, and a truncated 4-byte form followed by ASCII (repaired to
        // U+FFFD, which has the same length: the case a length check alone would miss).
        var cases: [[UInt8]] = [
            [], Array("plain".utf8), Array("é😀€".utf8), [0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
            [0xF0, 0x9F, 0x98, 0x41], [0xEF, 0xBF, 0xBD], Array(String(repeating: "base64+/", count: 700).utf8) + [0xFF],
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let length = Int.random(in: 0...24, using: &generator)
            // Mostly ASCII letters with a few high bytes: some well-formed, most not.
            cases.append(
                (0..<length).map { _ in
                    Bool.random(using: &generator)
                        ? UInt8.random(in: 0x61...0x7A, using: &generator) : UInt8.random(in: 0x80...0xF5, using: &generator)
                })
        }
        for bytes in cases {
            let json = [UInt8(ascii: "\"")] + bytes + [UInt8(ascii: "\"")]
            let expected = String(validating: bytes, as: UTF8.self)
            let parsed = try? JSONValue.parse(json)
            #expect(parsed == expected.map(JSONValue.string), "\(bytes)")
            // The same bytes after an escape take the other path through the reader.
            let escaped = [UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "n")] + bytes + [UInt8(ascii: "\"")]
            #expect((try? JSONValue.parse(escaped)) == expected.map { JSONValue.string("\n" + $0) }, "\(bytes)")
        }
    }
}
