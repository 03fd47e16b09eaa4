import Foundation
import ReceiptCore
import Testing

/// Hostile and broken input: always a ReceiptDecodingError, never a crash.
@Suite("Receipt decoder robustness")
struct ReceiptRobustnessTests {
    @Test("empty, unknown and oversized input")
    func basics() {
        #expect(throws: ReceiptDecodingError.empty) { try ReceiptDecoder.decode(bytes: []) }
        #expect(throws: ReceiptDecodingError.empty) { try ReceiptDecoder.decode(bytes: [0x20, 0x0A]) }
        #expect(throws: ReceiptDecodingError.empty) { try ReceiptDecoder.decode(base64: "") }
        #expect(throws: ReceiptDecodingError.unknownFormat) { try ReceiptDecoder.decode(bytes: Array("<?xml".utf8)) }
        #expect(throws: ReceiptDecodingError.unknownFormat) { try ReceiptDecoder.decode(bytes: [0x31, 0x00]) }
        #expect(throws: ReceiptDecodingError.tooLarge) {
            try ReceiptDecoder.decode(bytes: [0x30] + [UInt8](repeating: 0, count: ReceiptDecoder.maximumSize))
        }
        #expect(throws: ReceiptDecodingError.tooLarge) {
            try ReceiptDecoder.decode(base64: String(repeating: "A", count: 2 * ReceiptDecoder.maximumSize))
        }
        #expect(throws: ReceiptDecodingError.malformedTransactionReceipt) {
            try ReceiptDecoder.decode(bytes: Array("{ this is not a plist".utf8))
        }
    }

    @Test("PKCS#7 shape errors")
    func shapes() {
        let dataOID: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01]
        let tlv = ReceiptEncoderTests.tlv
        #expect(throws: ReceiptDecodingError.notPKCS7) { try ReceiptDecoder.decode(bytes: [0x30, 0x05, 0x01]) }
        #expect(throws: ReceiptDecodingError.notPKCS7) { try ReceiptDecoder.decode(bytes: tlv(0x30, tlv(0x02, [1]))) }
        // ContentInfo of type `data`, not signedData.
        #expect(throws: ReceiptDecodingError.notSignedData) {
            try ReceiptDecoder.decode(bytes: tlv(0x30, dataOID + tlv(0xA0, tlv(0x04, [1, 2]))))
        }
        // Detached signature: no eContent.
        let signedDataOID: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]
        let detached = tlv(0x30, signedDataOID + tlv(0xA0, tlv(0x30, tlv(0x02, [1]) + tlv(0x31, []) + tlv(0x30, dataOID) + tlv(0x31, []))))
        #expect(throws: ReceiptDecodingError.noContent) { try ReceiptDecoder.decode(bytes: detached) }
        // Signed content that is not a receipt payload.
        #expect(throws: ReceiptDecodingError.malformedPayload) {
            try ReceiptDecoder.decode(bytes: ReceiptEncoderTests.pkcs7(wrapping: [0x04, 0x01, 0x00]))
        }
    }

    @Test("pathological BER: deep nesting, huge lengths, endless indefinite lengths")
    func pathological() {
        let deep = [UInt8](repeating: 0x30, count: 1) + Array(repeating: [0x30, 0x80], count: 5000).flatMap { $0 }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(bytes: deep) }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(bytes: [0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF, 0x00]) }
        #expect(throws: ReceiptDecodingError.self) {
            try ReceiptDecoder.decode(bytes: [0x30, 0x88, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
        }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(bytes: [0x30, 0x80, 0x30, 0x80]) }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decodePayload([0x31, 0x80, 0x30, 0x80, 0x00]) }
        // In-app attribute whose value nests SETs beyond the parser's depth.
        let nested: [UInt8] = Array(repeating: [UInt8]([0x31, 0x80]), count: 100).flatMap { $0 } + [UInt8](repeating: 0, count: 200)
        #expect(throws: ReceiptDecodingError.self) {
            try ReceiptDecoder.decodePayload(
                ReceiptEncoderTests.set([ReceiptEncoderTests.attribute(2, [0x0C, 0x00]), ReceiptEncoderTests.attribute(17, nested)]))
        }
    }

    @Test("random bytes")
    func randomBytes() {
        var rng = ReceiptFuzzRNG(seed: 0xDEC0DE)
        for length in [1, 2, 3, 7, 64, 1000] {
            for first: UInt8 in [0x30, UInt8(ascii: "{"), 0x00] {
                let bytes = [first] + (1..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
                #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(bytes: bytes) }
            }
        }
    }

    @Test(
        "truncated real receipts never decode",
        .enabled(if: ReceiptTestData.available, Comment(rawValue: ReceiptTestData.skipMessage)),
        arguments: [
            "kvitto-sandboxReceipt.b64", "apple-xcode-app-receipt-with-transaction.b64", "transaction-cargobay-1.b64",
            "aiv-mac-mindnode-sha256.b64",
        ]
    )
    func truncated(_ name: String) throws {
        let bytes = try ReceiptTestData.bytes(name)
        #expect(try ReceiptDecoder.decode(bytes: bytes).bundleID.isEmpty == false)
        // Every cut in the first 200 bytes and the last 200, and every 7th elsewhere.
        let cuts = Array(0..<min(200, bytes.count)) + stride(from: 200, to: bytes.count, by: 7) + Array(max(0, bytes.count - 200)..<bytes.count)
        for cut in Set(cuts).sorted() {
            let prefix = Array(bytes[..<cut])
            // A transaction receipt cut inside the trailing "\n}" still lacks its closing brace.
            #expect(throws: ReceiptDecodingError.self, "cut at \(cut)") { try ReceiptDecoder.decode(bytes: prefix) }
        }
    }

    @Test(
        "20,000 seeded mutations of real receipts: errors, never crashes",
        .enabled(if: ReceiptTestData.available, Comment(rawValue: ReceiptTestData.skipMessage))
    )
    func fuzz() throws {
        let corpus = try ["imdhemy-single-receipt.b64", "tpinappreceipt-xcode.b64", "transaction-itunesiap-conftest.b64"]
            .map(ReceiptTestData.bytes)
        // The payload alone gets a share too: mutations there reach the attribute decoder instead of
        // mostly landing in certificates and signatures.
        let payload = try ReceiptDecoder.signedContent(ofPKCS7: corpus[0])
        let inputs = corpus + [payload]
        var rng = ReceiptFuzzRNG(seed: 20_251_121)
        var decoded = 0
        var failed = 0
        for iteration in 0..<20_000 {
            let source = inputs[iteration % inputs.count]
            var bytes = source
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let index = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<6, using: &rng) {
                case 0: bytes[index] ^= UInt8(1) << UInt8.random(in: 0...7, using: &rng)
                case 1: bytes[index] = UInt8.random(in: 0...255, using: &rng)
                case 2: bytes[index] = [0x00, 0x80, 0x81, 0x84, 0xFF, 0x30, 0x31, 0x04, 0x24][Int.random(in: 0..<9, using: &rng)]
                case 3: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: index)
                case 4: if bytes.count > 1 { bytes.remove(at: index) }
                default: bytes = Array(bytes[..<max(1, index)])
                }
            }
            do {
                if source == payload {
                    _ = try ReceiptDecoder.decodePayload(bytes)
                } else {
                    _ = try ReceiptDecoder.decode(bytes: bytes)
                }
                decoded += 1
            } catch {
                failed += 1
            }
        }
        #expect(decoded + failed == 20_000)
        // Both outcomes occur, or the mutations are not reaching the decoder.
        #expect(decoded > 100 && failed > 1000, "decoded \(decoded), failed \(failed)")
    }
}
