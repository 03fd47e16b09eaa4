import Foundation

/// Builds unified receipt payloads: what `receiptq forge` signs for tests and the local demo.
public enum ReceiptPayloadEncoder {
    /// DER payload for a unified receipt (the inverse of ``ReceiptDecoder/decodePayload(_:)``): what
    /// `receiptq forge` signs.
    ///
    /// Encoded exactly as Apple does: strings as UTF8String (tag 12) inside the OCTET STRING, integers as
    /// INTEGER, dates as IA5String RFC 3339 `2026-11-21T10:41:14Z`, absent expiry and cancellation dates
    /// as empty IA5Strings. Like Apple's, the SET's members are not in DER's sorted-encoding order:
    /// modelled attributes come by type, then `unknownAttributes` as given, so the in-app purchases and
    /// unknown attributes keep their order through a round trip.
    /// `style` and the transaction-only fields are ignored.
    public static func encode(_ receipt: AppReceipt) -> [UInt8] {
        var attributes: [ReceiptAttribute] = []
        func add(_ type: Int, _ value: [UInt8]) {
            attributes.append(ReceiptAttribute(type: type, version: 1, value: value))
        }
        add(ReceiptAttributeType.environment, utf8String(receipt.environment.rawValue))
        add(ReceiptAttributeType.bundleID, receipt.bundleIDValue ?? utf8String(receipt.bundleID))
        if let version = receipt.applicationVersion { add(ReceiptAttributeType.applicationVersion, utf8String(version)) }
        if let opaque = receipt.opaqueValue { add(ReceiptAttributeType.opaqueValue, opaque) }
        if let hash = receipt.sha1Hash { add(ReceiptAttributeType.sha1Hash, hash) }
        if let date = receipt.creationDate { add(ReceiptAttributeType.creationDate, dateString(date)) }
        for purchase in receipt.inApp { add(ReceiptAttributeType.inAppPurchase, encodeInAppPurchase(purchase)) }
        if let date = receipt.originalPurchaseDate { add(ReceiptAttributeType.originalPurchaseDate, dateString(date)) }
        if let version = receipt.originalApplicationVersion {
            add(ReceiptAttributeType.originalApplicationVersion, utf8String(version))
        }
        if let date = receipt.expirationDate { add(ReceiptAttributeType.expirationDate, dateString(date)) }
        attributes += receipt.unknownAttributes
        return attributeSet(attributes)
    }

    static func encodeInAppPurchase(_ purchase: InAppPurchase) -> [UInt8] {
        var attributes: [ReceiptAttribute] = []
        func add(_ type: Int, _ value: [UInt8]) {
            attributes.append(ReceiptAttribute(type: type, version: 1, value: value))
        }
        add(ReceiptAttributeType.quantity, ReceiptDERWriter.integer(Int64(purchase.quantity)))
        add(ReceiptAttributeType.productID, utf8String(purchase.productID))
        add(ReceiptAttributeType.transactionID, utf8String(purchase.transactionID))
        if let date = purchase.purchaseDate { add(ReceiptAttributeType.purchaseDate, dateString(date)) }
        add(ReceiptAttributeType.originalTransactionID, utf8String(purchase.originalTransactionID))
        if let date = purchase.originalPurchaseDate {
            add(ReceiptAttributeType.inAppOriginalPurchaseDate, dateString(date))
        }
        add(ReceiptAttributeType.expiresDate, purchase.expiresDate.map(dateString) ?? ReceiptDERWriter.ia5String(""))
        if let lineItem = purchase.webOrderLineItemID {
            // An INTEGER like Apple's; a value that is not one is kept as a string rather than lost.
            // Only a canonical decimal becomes an INTEGER, so "0042" survives a round trip.
            if let number = Int64(lineItem), String(number) == lineItem {
                add(ReceiptAttributeType.webOrderLineItemID, ReceiptDERWriter.integer(number))
            } else {
                add(ReceiptAttributeType.webOrderLineItemID, utf8String(lineItem))
            }
        }
        add(ReceiptAttributeType.cancellationDate, purchase.cancellationDate.map(dateString) ?? ReceiptDERWriter.ia5String(""))
        add(ReceiptAttributeType.isTrialPeriod, ReceiptDERWriter.integer(purchase.isTrialPeriod ? 1 : 0))
        add(ReceiptAttributeType.isInIntroOfferPeriod, ReceiptDERWriter.integer(purchase.isInIntroOfferPeriod ? 1 : 0))
        if let offer = purchase.promotionalOfferID { add(ReceiptAttributeType.promotionalOfferID, utf8String(offer)) }
        attributes += purchase.unknownAttributes
        return attributeSet(attributes)
    }

    private static func attributeSet(_ attributes: [ReceiptAttribute]) -> [UInt8] {
        // Written in the given order (modelled attributes by type, then the unknown ones as decoded), so
        // a decode → encode → decode round trip reproduces the receipt exactly.
        var content: [UInt8] = []
        for attribute in attributes {
            var fields = ReceiptDERWriter.integer(Int64(attribute.type))
            fields += ReceiptDERWriter.integer(Int64(attribute.version))
            fields += ReceiptDERWriter.element(tag: 0x04, attribute.value)
            content += ReceiptDERWriter.element(tag: 0x30, fields)
        }
        return ReceiptDERWriter.element(tag: 0x31, content)
    }

    private static func utf8String(_ text: String) -> [UInt8] { ReceiptDERWriter.element(tag: 0x0C, Array(text.utf8)) }

    private static func dateString(_ date: Date) -> [UInt8] { ReceiptDERWriter.ia5String(ReceiptDate.format(date)) }
}

/// Just enough DER for receipt payloads.
enum ReceiptDERWriter {
    static func element(tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        var output = [tag]
        let count = content.count
        if count < 0x80 {
            output.append(UInt8(count))
        } else {
            var lengthBytes: [UInt8] = []
            var remaining = count
            while remaining > 0 {
                lengthBytes.insert(UInt8(truncatingIfNeeded: remaining), at: 0)
                remaining >>= 8
            }
            output.append(0x80 | UInt8(lengthBytes.count))
            output += lengthBytes
        }
        return output + content
    }

    /// Minimal two's-complement INTEGER.
    static func integer(_ value: Int64) -> [UInt8] {
        var bytes = withUnsafeBytes(of: value.bigEndian, Array.init)
        while bytes.count > 1,
            (bytes[0] == 0x00 && bytes[1] & 0x80 == 0) || (bytes[0] == 0xFF && bytes[1] & 0x80 != 0)
        {
            bytes.removeFirst()
        }
        return element(tag: 0x02, bytes)
    }

    static func ia5String(_ text: String) -> [UInt8] { element(tag: 0x16, Array(text.utf8)) }
}
