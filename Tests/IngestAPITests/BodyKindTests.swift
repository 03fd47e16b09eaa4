import Testing

@testable import IngestAPI

@Suite("The media type the input check reads a body as")
struct BodyKindTests {
    @Test(
        "Parameters, blanks and case do not matter; the type itself does",
        arguments: [
            ("application/json", "application/json"), ("Application/JSON; charset=utf-8", "application/json"),
            ("  application/json ;charset=UTF-8", "application/json"), ("\tapplication/merge-patch+json\t", "application/merge-patch+json"),
            ("application/x-www-form-urlencoded;", "application/x-www-form-urlencoded"), ("", nil), (";", nil), (" \t; x=y", nil),
            ("text/plain", "text/plain"), ("application/jsonx", "application/jsonx"), ("application/jsön", "application/jsön"),
        ])
    func mediaType(_ header: String, _ expected: String?) {
        #expect(BodyKind.mediaType(header) == expected)
    }

    @Test(
        "Header values lose spaces and tabs at both ends, nothing else",
        arguments: [
            ("  rq_abc\t", "rq_abc"), ("rq_abc", "rq_abc"), (" \t ", ""), ("", ""), ("a b", "a b"), ("\u{00A0}x", "\u{00A0}x"),
        ])
    func trimmed(_ value: String, _ expected: String) {
        #expect(HTTPText.trimmed(value) == expected)
    }
}
