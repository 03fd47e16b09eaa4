import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Input hygiene: what Postgres cannot store is refused at the door, with the field named")
struct InputHygieneTests {
    static func json(_ text: String) -> FieldError? { InputHygiene.jsonProblem(Array(text.utf8)) }

    @Test("NUL anywhere in a JSON string is refused, naming the path from the root")
    func nul() {
        #expect(Self.json(#"{"user_identifier":"nul\u0000user"}"#)?.field == "user_identifier")
        #expect(Self.json(#"{"receipt":"x","metadata":{"a":{"b":[1,"ok","\u0000"]}}}"#)?.field == "metadata.a.b[2]")
        #expect(Self.json(#"{"metadata":{"k\u0000":1}}"#) == FieldError(field: "metadata", reason: "keys must not contain U+0000 (NUL)"))
        #expect(Self.json(#"["a","\u0000"]"#)?.field == "[1]")
        #expect(Self.json(#""\u0000""#)?.field == "body")
        // Escapes that only look like a NUL.
        #expect(Self.json(#"{"a":"\\u0000","b":"\u00000","c":"\u0100"}"#)?.field == "b")
        #expect(Self.json(#"{"a":"\\u0000","c":"\u0100"}"#) == nil)
    }

    @Test("A lone surrogate escape is refused; a pair is text")
    func surrogates() {
        #expect(Self.json(#"{"a":"\ud83d\ude00","b":"\uD83D\uDE00"}"#) == nil)
        for bad in [#""\ud800""#, #""x\ud800y""#, #""\udc00""#, #""\ud800\u0041""#, #""\ud800\ud800""#, #""\ude00\ud83d""#] {
            let problem = Self.json(#"{"user_identifier":\#(bad)}"#)
            #expect(problem?.field == "user_identifier", "\(bad)")
            #expect(problem?.reason.contains("surrogate") == true, "\(bad)")
        }
    }

    @Test("Bytes that are not UTF-8 are refused: overlong forms, encoded surrogates, truncated sequences, stray bytes")
    func utf8() {
        for bytes: [UInt8] in [[0xC0, 0x80], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80], [0xF8, 0x88, 0x80, 0x80, 0x80], [0xE2, 0x82], [0xFF]] {
            let body = Array(#"{"country_code":"US","user_identifier":"a"#.utf8) + bytes + Array(#"b"}"#.utf8)
            #expect(InputHygiene.jsonProblem(body)?.field == "user_identifier", "\(bytes)")
            #expect(InputHygiene.problem(utf8: bytes) != nil)
        }
        #expect(Self.json(#"{"a":"日本語 ✓ 😀"}"#) == nil)
        #expect(InputHygiene.problem(in: "a\u{0}b") != nil)
        #expect(InputHygiene.problem(in: "日本語") == nil)
    }

    @Test("JSON may nest 32 levels, not 33")
    func depth() {
        let deep = { (levels: Int) in
            "{\"metadata\":" + String(repeating: "[", count: levels - 1) + String(repeating: "]", count: levels - 1) + "}"
        }
        #expect(Self.json(deep(32)) == nil)
        let problem = Self.json(deep(33))
        #expect(problem?.field.hasPrefix("metadata[0]") == true)
        #expect(problem?.reason.contains("32") == true)
        #expect(Self.json(String(repeating: "[", count: 100_000)) != nil)
    }

    @Test("Malformed JSON is the parser's business: nothing here crashes or claims it")
    func malformed() {
        for text in [#"{"a":"\u00"#, #"{"a":"\"#, #""\u"#, "{", "}", "]]]", #"{"a"}"#, "", #"{"a":"\ud800\u"#] {
            _ = Self.json(text)
        }
        #expect(Self.json(#"{"a":"unterminated"#) == nil)
    }

    @Test("Forms and query strings: each name and value percent-decoded; the parameter named when printable")
    func forms() {
        #expect(InputHygiene.formProblem(Array("user_identifier=a%00b".utf8), where: "query")?.field == "user_identifier")
        #expect(InputHygiene.formProblem(Array("a=1&productCode=%C0%80".utf8), where: "form")?.field == "productCode")
        #expect(InputHygiene.formProblem(Array("a=1&b=%ED%A0%80".utf8), where: "form")?.field == "b")
        #expect(
            InputHygiene.formProblem(Array("%00=1".utf8), where: "form")
                == FieldError(field: "form", reason: "parameter names must not contain U+0000 (NUL)"))
        #expect(InputHygiene.formProblem(Array("n%FF=1".utf8), where: "query")?.field == "query")
        // `%` without two hex digits stays literal; `+` is a space; UTF-8 in percent form is text.
        #expect(InputHygiene.formProblem(Array("a=%zz&b=%0&c=x+y&d=%E6%97%A5&e=&&f".utf8), where: "query") == nil)
        #expect(InputHygiene.pathProblem(Array("/client/subscriptions/a%00b".utf8))?.field == "path")
        #expect(InputHygiene.pathProblem(Array("/client/subscriptions/1000000123%20x".utf8)) == nil)
    }

    @Test("Seeded noise: never a crash, and a NUL escape planted in a string value is always found")
    func noise() {
        var generator = SeededGenerator(seed: 0x1316)
        let alphabet = Array(#"{}[]",:\u0aAdD89 "#.utf8) + [0x00, 0xC0, 0xED, 0xFF]
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0..<80, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            _ = InputHygiene.jsonProblem(bytes)
            _ = InputHygiene.formProblem(bytes, where: "form")
        }
        for round in 0..<200 {
            let prefix = String(repeating: "x", count: Int.random(in: 0..<5, using: &generator))
            let text = #"{"meta":{"list":[\#(round),"\#(prefix)\u0000"]}}"#
            #expect(Self.json(text)?.field == "meta.list[1]")
        }
    }
}
