import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Receipt base64 tolerance")
struct ReceiptBase64Tests {
    /// Bytes whose base64 has '+', '/' and needs padding.
    static let bytes: [UInt8] = [0xFB, 0xEF, 0xBE, 0xFF, 0xFF, 0xFE, 0x3E, 0x00, 0x30, 0x82]
    static let canonical = Data(bytes).base64EncodedString()  // "++++///+PgAwgg=="

    @Test(
        "mangled forms decode to the same bytes",
        arguments: [
            canonical,
            canonical.replacingOccurrences(of: "+", with: " "),  // form-decoded query string
            canonical.replacingOccurrences(of: "=", with: ""),  // padding stripped
            canonical.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"),  // URL-safe
            "++++\n///+\r\nPgAw\tgg==\n",  // line-wrapped (mail, PEM-ish)
            canonical + "  ",  // trailing blanks after the padding
        ])
    func mangled(_ text: String) throws {
        #expect(try ReceiptDecoder.base64Bytes(text) == Self.bytes)
    }

    @Test(
        "the normalized base64 is the bytes' standard encoding, whatever form they came in",
        arguments: [
            canonical,
            canonical.replacingOccurrences(of: "+", with: " "),
            canonical.replacingOccurrences(of: "=", with: ""),
            canonical.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"),
            "++++\n///+\r\nPgAw\tgg==\n",
            canonical + "  ",
            "++++///+PgAwgh==",  // the last sextet's unused bits set: decodes to the same bytes
        ])
    func normalized(_ text: String) throws {
        let bytes = try ReceiptDecoder.base64Bytes(text)
        #expect(bytes == Self.bytes)
        #expect(ReceiptDecoder.normalizedBase64(text, bytes: bytes) == Self.canonical)
    }

    @Test("canonical text is kept as sent, for every length and padding")
    func canonicalKept() throws {
        var generator = SeededGenerator(seed: 64)
        for count in 1...96 {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Data(bytes).base64EncodedString()
            #expect(try ReceiptDecoder.base64Bytes(text) == bytes)
            #expect(ReceiptDecoder.normalizedBase64(text, bytes: bytes) == text)
            // Set the unused bits of the last sextet (when there are any): same bytes, new text.
            if count % 3 != 0 {
                var mangled = Array(text.utf8)
                let last = mangled.lastIndex { $0 != UInt8(ascii: "=") }!
                let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
                let value = alphabet.firstIndex(of: mangled[last])!
                mangled[last] = alphabet[value | 1]
                let changed = String(decoding: mangled, as: UTF8.self)
                #expect(try ReceiptDecoder.base64Bytes(changed) == bytes)
                #expect(ReceiptDecoder.normalizedBase64(changed, bytes: bytes) == text)
            }
        }
    }

    @Test("Any mix of blanks, URL-safe letters and stripped padding decodes to the bytes, and only the untouched text is kept")
    func mangledAnywhere() throws {
        var generator = SeededGenerator(seed: 4648)
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 1...300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Data(bytes).base64EncodedString()
            var mangled = Array(text.utf8)
            // Blanks anywhere before the padding, in the middle of a group of four or between them.
            for _ in 0..<Int.random(in: 0...4, using: &generator) {
                let end = mangled.firstIndex(of: UInt8(ascii: "=")) ?? mangled.count
                mangled.insert(
                    [UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t")].randomElement(using: &generator)!,
                    at: Int.random(in: 0...end, using: &generator))
            }
            if Bool.random(using: &generator) {
                mangled = mangled.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: "-") : $0 == UInt8(ascii: "/") ? UInt8(ascii: "_") : $0 }
            }
            if Bool.random(using: &generator) { mangled.removeAll { $0 == UInt8(ascii: "=") } }
            let sent = String(decoding: mangled, as: UTF8.self)
            #expect(try ReceiptDecoder.base64Bytes(sent) == bytes, "\(sent)")
            #expect(ReceiptDecoder.normalizedBase64(sent, bytes: bytes) == text)
            #expect((ReceiptDecoder.normalizedBase64(sent, bytes: bytes) == sent) == (sent == text))
            // A byte outside the alphabet anywhere makes it invalid.
            var broken = mangled
            broken.insert(UInt8(ascii: "*"), at: Int.random(in: 0...broken.count, using: &generator))
            #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.base64Bytes(String(decoding: broken, as: UTF8.self)) }
        }
    }

    @Test("invalid text is rejected", arguments: ["*not base64*", "QUJD=QUJD", "A", "QUJDR", "QQ===", "%2B%2F"])
    func invalid(_ text: String) {
        #expect(throws: ReceiptDecodingError.invalidBase64) { try ReceiptDecoder.base64Bytes(text) }
    }

    @Test("empty text is .empty", arguments: ["", "\n", "\r\n\t"])
    func empty(_ text: String) {
        #expect(throws: ReceiptDecodingError.empty) { try ReceiptDecoder.base64Bytes(text) }
    }

    @Test(
        "a real receipt survives query-string mangling",
        .enabled(if: ReceiptTestData.available, Comment(rawValue: ReceiptTestData.skipMessage)))
    func realReceipt() throws {
        let text = try ReceiptTestData.base64("revenuecat-sandboxReceipt.b64")
        #expect(text.contains("+"), "fixture should exercise '+'")
        let reference = try ReceiptDecoder.decode(base64: text)
        var wrapped = ""
        for (index, character) in text.replacingOccurrences(of: "+", with: " ").replacingOccurrences(of: "=", with: "").enumerated() {
            if index > 0, index % 76 == 0 { wrapped += "\r\n" }
            wrapped.append(character)
        }
        #expect(try ReceiptDecoder.decode(base64: wrapped) == reference)
        #expect(reference.inApp.count == 9)
    }

    @Test("errors expose a bounded code and no receipt bytes")
    func errorShape() {
        let secret = "MIISecretReceiptBytes"
        do {
            _ = try ReceiptDecoder.decode(base64: secret + "*")
            Issue.record("expected an error")
        } catch {
            #expect(error == .invalidBase64)
            #expect(error.reason == "invalid_base64")
            #expect(!error.description.contains("Secret"))
            #expect(error != .empty)
        }
        let all: [ReceiptDecodingError] = [
            .invalidBase64, .empty, .unknownFormat, .notPKCS7, .notSignedData, .noContent,
            .malformedPayload, .malformedTransactionReceipt, .tooLarge,
        ]
        #expect(Set(all.map(\.reason)).count == all.count)
        #expect(all.allSatisfy { $0.reason.count <= 40 && $0.reason.allSatisfy { $0.isLowercase || $0 == "_" || $0.isNumber } })
    }

    @Test("environments map to the API names")
    func environments() {
        #expect(ReceiptEnvironment.production.apiName == "production" && !ReceiptEnvironment.production.isSandbox)
        #expect(ReceiptEnvironment(rawValue: "ProductionVPP").apiName == "production")
        #expect(ReceiptEnvironment.productionSandbox.apiName == "sandbox" && ReceiptEnvironment.productionSandbox.isSandbox)
        #expect(ReceiptEnvironment(rawValue: "ProductionVPPSandbox").apiName == "sandbox")
        #expect(ReceiptEnvironment.sandbox.apiName == "sandbox")
        #expect(ReceiptEnvironment.xcode.apiName == "xcode" && ReceiptEnvironment.xcode.isSandbox)
        #expect(ReceiptEnvironment(rawValue: "LocalTesting").apiName == "xcode")
        #expect(ReceiptEnvironment.xcode.rawValue == "Xcode")
    }
}
