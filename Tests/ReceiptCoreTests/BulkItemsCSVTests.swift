import ReceiptCore
import Testing

/// The CSV line reader `receiptq import --format csv` uses (RFC 4180 on one line).
@Suite("BulkItems.csvFields")
struct BulkItemsCSVTests {
    func fields(_ text: String) -> [String]? { BulkItems.csvFields(Array(text.utf8)[...]) }

    @Test("commas split, quotes protect commas and quotes, blanks around a field are trimmed")
    func fieldsOfALine() {
        #expect(fields("a,b,c") == ["a", "b", "c"])
        #expect(fields(#" "x, y" , "say ""hi""",z"#) == ["x, y", #"say "hi""#, "z"])
        #expect(fields("a,,") == ["a", "", ""])
        #expect(fields("") == [""])
        #expect(fields("a\tb , c\r") == ["a\tb", "c"])
        // A quote inside an unquoted field is kept as it is.
        #expect(fields(#"ab"c,d"#) == [#"ab"c"#, "d"])
    }

    @Test("an unclosed quote is no line (a field may not span lines)")
    func unclosedQuote() {
        #expect(fields(#"a,"unclosed"#) == nil)
        #expect(fields(#""""#) == [""])
    }
}
