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
}
