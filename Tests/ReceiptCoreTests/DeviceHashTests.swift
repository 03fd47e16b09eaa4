import Foundation
import ReceiptCore
import Testing

/// The device hash input, byte for byte as Apple's receipt validation guide lays it out.
@Suite("Device hash input")
struct DeviceHashTests {
    @Test("The vendor id's 16 bytes, the opaque value, then the bundle id attribute's DER value")
    func layout() throws {
        let vendor = try #require(UUID(uuidString: "00112233-4455-6677-8899-AABBCCDDEEFF"))
        var receipt = AppReceipt(bundleID: "com.ex", environment: .production, opaqueValue: [0xAA, 0xBB], sha1Hash: Array(repeating: 0, count: 20))
        let input = try #require(DeviceHash.input(identifierForVendor: vendor, receipt: receipt))
        #expect(
            input == [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF, 0xAA, 0xBB, 0x0C, 0x06]
                + Array("com.ex".utf8))

        // An unusual encoding as signed (here a long-form length) is hashed as it came, and
        // survives a decode.
        receipt.bundleIDValue = [0x0C, 0x81, 0x06] + Array("com.ex".utf8)
        #expect(DeviceHash.input(identifierForVendor: vendor, receipt: receipt)?.suffix(9) == [0x0C, 0x81, 0x06] + Array("com.ex".utf8))
        let decoded = try ReceiptDecoder.decodePayload(ReceiptPayloadEncoder.encode(receipt))
        #expect(decoded.bundleID == "com.ex")
        #expect(decoded.bundleIDValue == receipt.bundleIDValue)
        receipt.bundleIDValue = nil
        #expect(try ReceiptDecoder.decodePayload(ReceiptPayloadEncoder.encode(receipt)).bundleIDValue == nil, "nil for Apple's plain encoding")
    }

    @Test("A transaction receipt, or a unified one without an opaque value or hash, cannot say")
    func cannotSay() {
        let vendor = UUID()
        #expect(
            DeviceHash.input(
                identifierForVendor: vendor,
                receipt: AppReceipt(style: .transaction, bundleID: "b", environment: .production, opaqueValue: [1], sha1Hash: [2])) == nil)
        #expect(DeviceHash.input(identifierForVendor: vendor, receipt: AppReceipt(bundleID: "b", environment: .production, sha1Hash: [2])) == nil)
        #expect(DeviceHash.input(identifierForVendor: vendor, receipt: AppReceipt(bundleID: "b", environment: .production, opaqueValue: [1])) == nil)
    }
}
