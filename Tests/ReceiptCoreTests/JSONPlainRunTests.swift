import ReceiptTesting
import Testing

@testable import ReceiptCore

/// The eight-bytes-a-step scan that the JSON reader and writer share finds the first quote,
/// backslash or control character exactly where a byte-by-byte scan does.
@Suite("JSON plain runs")
struct JSONPlainRunTests {
    @Test("The first quote, backslash or control byte, at every offset and alignment, among any other bytes")
    func findsWhatAByteLoopFinds() {
        var generator = SeededGenerator(seed: 0x22_5C)
        let specials: [UInt8] = [0x22, 0x5C, 0x00, 0x1F, 0x0A]
        // Bytes next to the specials in value, which a word-wide test could mistake for them.
        let others: [UInt8] = [0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80, 0xA2, 0xDC, 0xFF, UInt8(ascii: "A")]
        for _ in 0..<5_000 {
            let count = Int.random(in: 0...40, using: &generator)
            var bytes = (0..<count).map { _ in others.randomElement(using: &generator)! }
            for _ in 0..<Int.random(in: 0...2, using: &generator) where count > 0 {
                bytes[Int.random(in: 0..<count, using: &generator)] = specials.randomElement(using: &generator)!
            }
            let start = Int.random(in: 0...count, using: &generator)
            let expected = (start..<count).first { specials.contains(bytes[$0]) || bytes[$0] < 0x20 } ?? count
            bytes.withUnsafeBufferPointer { buffer in
                #expect(JSONPlainRun.end(of: buffer, from: start) == expected, "\(bytes) from \(start)")
                #expect(JSONWriter.needsEscaping(buffer) == bytes.contains { specials.contains($0) || $0 < 0x20 })
            }
        }
    }
}
