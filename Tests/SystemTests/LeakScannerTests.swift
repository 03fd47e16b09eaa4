import Foundation
import ServerTesting
import SystemTesting
import Testing

@Suite("The leak scanner of the log test", .blockingWork)
struct LeakScannerTests {
    @Test("Finds a secret, a whole receipt, 24 characters of one, in raw, JSON-escaped or percent-encoded form")
    func finds() {
        let receipt = String((0..<400).map { _ in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".randomElement()! })
        let scanner = LeakScanner(secrets: ["secret": "s3cret-value"], receipts: ["r": receipt])
        func leaks(_ text: String, values: String = "") -> [String] { scanner.scan([("f", Array(text.utf8), values)]) }
        #expect(leaks(#"{"msg":"nothing here"}"#).isEmpty)
        #expect(leaks("x s3cret-value y") == ["f (raw): secret", "f (percent-decoded): secret"])
        #expect(leaks(String(receipt.dropFirst(100).prefix(24))).contains("f (raw): 24 characters of receipt r"))
        #expect(leaks(String(receipt.prefix(16 + 23))).isEmpty, "the shared header and less than 24 characters past it are not a leak")
        let slice = String(receipt.dropFirst(200).prefix(60))
        let escaped = slice.replacingOccurrences(of: "/", with: "\\/")
        #expect(leaks(escaped, values: slice).contains("f (JSON-decoded): 24 characters of receipt r"))
        let encoded = slice.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        #expect(leaks(encoded).contains("f (percent-decoded): 24 characters of receipt r"))
    }
}
