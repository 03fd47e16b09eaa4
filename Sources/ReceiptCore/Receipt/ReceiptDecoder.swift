import Foundation
import SwiftASN1

/// Decodes receipts of both styles into ``AppReceipt``. Pure: no I/O, and no signature check
/// (that is done elsewhere, with OpenSSL, on the same bytes).
public enum ReceiptDecoder {
    /// Larger inputs are refused before parsing: real receipts are a few KiB (a few hundred KiB
    /// with thousands of renewals), and the parser's work grows with the input.
    public static let maximumSize = 1 << 20

    /// Tolerant base64: strips whitespace/newlines, turns spaces back into '+' (query strings mangle them),
    /// accepts missing padding and URL-safe alphabet.
    public static func base64Bytes(_ text: String) throws(ReceiptDecodingError) -> [UInt8] {
        // Base64 of 1 MiB is ~1.4 MiB of text; refuse longer text before allocating.
        guard text.utf8.count <= maximumSize / 3 * 4 + maximumSize / 8 else { throw .tooLarge }
        guard let bytes = ReceiptBase64.decode(text) else { throw .invalidBase64 }
        guard !bytes.isEmpty else { throw .empty }
        return bytes
    }

    /// The receipt's base64 as stored and sent to Apple: `text` itself when it already is the
    /// standard padded base64 of `bytes` (what an app sends), else `bytes` encoded again (text with
    /// line breaks, `+` turned into spaces, URL-safe letters, no padding).
    /// - Parameters:
    ///   - text: what ``base64Bytes(_:)`` decoded.
    ///   - bytes: what it decoded to.
    public static func normalizedBase64(_ text: String, bytes: [UInt8]) -> String {
        ReceiptBase64.isCanonical(text, decodedCount: bytes.count) ? text : Data(bytes).base64EncodedString()
    }

    /// Decodes a base64 receipt of either style (see ``base64Bytes(_:)`` for the tolerated mangling).
    public static func decode(base64 text: String) throws(ReceiptDecodingError) -> AppReceipt {
        try decode(bytes: base64Bytes(text))
    }

    /// Decodes a receipt of either style: a leading `0x30` (SEQUENCE) is a unified receipt, a leading
    /// `{` an iOS 6 transaction receipt; anything else is ``ReceiptDecodingError/unknownFormat``.
    public static func decode(bytes: [UInt8]) throws(ReceiptDecodingError) -> AppReceipt {
        guard bytes.count <= maximumSize else { throw .tooLarge }
        // Leading whitespace only matters for the plist; DER never starts with it.
        guard let first = bytes.first(where: { !OldStylePlist.isWhitespace($0) }) else { throw .empty }
        switch first {
        case 0x30 where bytes[0] == 0x30:
            return try decodePayload(signedContent(ofPKCS7: bytes))
        case UInt8(ascii: "{"):
            return try TransactionReceiptCodec.decode(bytes)
        default:
            throw .unknownFormat
        }
    }

    /// The PKCS#7 SignedData's encapsulated content (the receipt payload) — parsed with SwiftASN1's
    /// BER entry points (Xcode receipts use BER indefinite lengths and constructed OCTET STRINGs).
    public static func signedContent(ofPKCS7 bytes: [UInt8]) throws(ReceiptDecodingError) -> [UInt8] {
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= maximumSize else { throw .tooLarge }
        let trimmed = trimmedToFirstElement(bytes)
        if let payload = try trimmed.withUnsafeBufferPointer({ buffer throws(ReceiptDecodingError) -> [UInt8]? in
            guard let scanner = BERScanner(buffer) else { return nil }
            return try signedContent(scanner, buffer)
        }) {
            return payload
        }
        let root: ASN1Node
        do {
            root = try BER.parse(trimmed)
        } catch {
            throw .notPKCS7
        }
        // ContentInfo ::= SEQUENCE { contentType OID, content [0] EXPLICIT ANY }
        guard root.identifier == .sequence, case .constructed(let contentInfo) = root.content else { throw .notPKCS7 }
        var contentInfoFields = contentInfo.makeIterator()
        guard let contentType = contentInfoFields.next(), contentType.identifier == .objectIdentifier,
            case .primitive(let oid) = contentType.content
        else { throw .notPKCS7 }
        guard oid.elementsEqual(signedDataOID) else { throw .notSignedData }
        guard let explicitContent = contentInfoFields.next(), explicitContent.identifier == contextZero,
            case .constructed(let explicitChildren) = explicitContent.content,
            let signedData = explicitChildren.first(where: { _ in true }),
            signedData.identifier == .sequence, case .constructed(let signedDataFields) = signedData.content
        else { throw .notSignedData }

        // SignedData ::= SEQUENCE { version, digestAlgorithms SET, encapContentInfo SEQUENCE, ... }
        var fields = signedDataFields.makeIterator()
        guard let version = fields.next(), version.identifier == .integer,
            let digests = fields.next(), digests.identifier == .set,
            let encapsulated = fields.next(), encapsulated.identifier == .sequence,
            case .constructed(let encapsulatedFields) = encapsulated.content
        else { throw .notSignedData }

        // EncapsulatedContentInfo ::= SEQUENCE { eContentType OID, eContent [0] EXPLICIT OCTET STRING OPTIONAL }
        var encapsulatedIterator = encapsulatedFields.makeIterator()
        guard let eContentType = encapsulatedIterator.next(), eContentType.identifier == .objectIdentifier else {
            throw .notSignedData
        }
        guard let eContent = encapsulatedIterator.next() else { throw .noContent }
        guard eContent.identifier == contextZero, case .constructed(let eContentChildren) = eContent.content,
            let octets = eContentChildren.first(where: { _ in true })
        else { throw .notSignedData }
        guard let payload = octetStringContents(octets) else { throw .notSignedData }
        guard !payload.isEmpty else { throw .noContent }
        return payload
    }

    /// The checks above, on the nodes of a ``BERScanner`` instead of `BER.parse`'s tree: the same
    /// questions in the same order, so the same payload or error. (The scanner only takes low tag
    /// numbers, so comparing identifier bytes is comparing `ASN1Identifier`s.)
    private static func signedContent(_ scanner: BERScanner, _ bytes: UnsafeBufferPointer<UInt8>) throws(ReceiptDecodingError) -> [UInt8] {
        let nodes = scanner.nodes
        func contents(_ index: Int) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: bytes[nodes[index].contents]) }
        // ContentInfo ::= SEQUENCE { contentType OID, content [0] EXPLICIT ANY }
        guard nodes[0].identifier == 0x30 else { throw .notPKCS7 }
        let contentInfo = scanner.children(of: 0)
        guard contentInfo.count >= 1, nodes[contentInfo[0]].identifier == 0x06 else { throw .notPKCS7 }
        guard contents(contentInfo[0]).elementsEqual(signedDataOID) else { throw .notSignedData }
        guard contentInfo.count >= 2, nodes[contentInfo[1]].identifier == 0xA0,
            let signedData = scanner.firstChild(of: contentInfo[1]), nodes[signedData].identifier == 0x30
        else { throw .notSignedData }

        // SignedData ::= SEQUENCE { version, digestAlgorithms SET, encapContentInfo SEQUENCE, ... }
        let fields = scanner.children(of: signedData)
        guard fields.count >= 3, nodes[fields[0]].tag == 0x02, nodes[fields[1]].tag == 0x11, nodes[fields[2]].identifier == 0x30 else {
            throw .notSignedData
        }

        // EncapsulatedContentInfo ::= SEQUENCE { eContentType OID, eContent [0] EXPLICIT OCTET STRING OPTIONAL }
        let encapsulated = scanner.children(of: fields[2])
        guard encapsulated.count >= 1, nodes[encapsulated[0]].tag == 0x06 else { throw .notSignedData }
        guard encapsulated.count >= 2 else { throw .noContent }
        guard nodes[encapsulated[1]].identifier == 0xA0, let octets = scanner.firstChild(of: encapsulated[1]) else {
            throw .notSignedData
        }
        var payload: [UInt8] = []
        func append(_ index: Int) -> Bool {
            guard nodes[index].tag == 0x04 else { return false }
            guard nodes[index].isConstructed else {
                payload.append(contentsOf: contents(index))
                return true
            }
            return scanner.children(of: index).allSatisfy(append)
        }
        guard append(octets) else { throw .notSignedData }
        guard !payload.isEmpty else { throw .noContent }
        return payload
    }

    /// Decodes a receipt payload: `SET OF ReceiptAttribute { type INTEGER, version INTEGER, value OCTET STRING }`.
    ///
    /// The SET's children are read in wire order: Apple's payloads are not in DER SET order, so
    /// `DER.set(of:)` would reject them.
    public static func decodePayload(_ payload: [UInt8]) throws(ReceiptDecodingError) -> AppReceipt {
        guard payload.count <= maximumSize else { throw .tooLarge }
        let attributes = try parseAttributeSet(payload)
        var receipt = AppReceipt(bundleID: "", environment: .production)
        var sawBundleID = false
        // Modelled receipt attribute types are 0…21: one bit each.
        var seen: UInt64 = 0
        for attribute in attributes {
            let type = attribute.type
            // A second copy of a modelled field would let two readers of one signed receipt disagree.
            if type != ReceiptAttributeType.inAppPurchase, isModelledReceiptAttribute(type) {
                let bit: UInt64 = 1 << UInt64(type)
                guard seen & bit == 0 else { throw .malformedPayload }
                seen |= bit
            }
            let value = attribute.value
            switch type {
            case ReceiptAttributeType.environment:
                receipt.environment = ReceiptEnvironment(rawValue: try requiredString(value))
            case ReceiptAttributeType.bundleID:
                receipt.bundleID = try requiredString(value)
                if value != ReceiptDERWriter.element(tag: 0x0C, Array(receipt.bundleID.utf8)) { receipt.bundleIDValue = value }
                sawBundleID = true
            case ReceiptAttributeType.applicationVersion:
                receipt.applicationVersion = try optionalString(value)
            case ReceiptAttributeType.opaqueValue:
                receipt.opaqueValue = value
            case ReceiptAttributeType.sha1Hash:
                receipt.sha1Hash = value
            case ReceiptAttributeType.creationDate:
                receipt.creationDate = try optionalDate(value)
            case ReceiptAttributeType.inAppPurchase:
                receipt.inApp.append(try decodeInAppPurchase(value))
            case ReceiptAttributeType.originalPurchaseDate:
                receipt.originalPurchaseDate = try optionalDate(value)
            case ReceiptAttributeType.originalApplicationVersion:
                receipt.originalApplicationVersion = try optionalString(value)
            case ReceiptAttributeType.expirationDate:
                receipt.expirationDate = try optionalDate(value)
            default:
                receipt.unknownAttributes.append(attribute)
            }
        }
        // Without a bundle id nothing downstream can match the receipt to an app.
        guard sawBundleID else { throw .malformedPayload }
        return receipt
    }

    // MARK: - Internals

    /// 1.2.840.113549.1.7.2, the OID's content bytes.
    private static let signedDataOID: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]
    private static let contextZero = ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)

    private static func isModelledReceiptAttribute(_ type: Int) -> Bool {
        switch type {
        case 0, 2, 3, 4, 5, 12, 17, 18, 19, 21: return true
        default: return false
        }
    }

    private static func isModelledInAppAttribute(_ type: Int) -> Bool {
        switch type {
        case 1701, 1702, 1703, 1704, 1705, 1706, 1708, 1711, 1712, 1713, 1719, 1721: return true
        default: return false
        }
    }

    /// Drops bytes after the first definite-length element: some sources pad or append a newline,
    /// and SwiftASN1 rejects trailing data. Indefinite lengths are left to the parser.
    private static func trimmedToFirstElement(_ bytes: [UInt8]) -> ArraySlice<UInt8> {
        guard bytes.count >= 2 else { return bytes[...] }
        let first = bytes[1]
        var length = 0
        var header = 2
        if first < 0x80 {
            length = Int(first)
        } else if first == 0x80 {
            return bytes[...]
        } else {
            let count = Int(first & 0x7F)
            guard count <= 4, bytes.count >= 2 + count else { return bytes[...] }
            for index in 0..<count { length = length << 8 | Int(bytes[2 + index]) }
            header += count
        }
        let total = header + length
        return total < bytes.count ? bytes[..<total] : bytes[...]
    }

    /// An OCTET STRING's bytes, primitive or (BER) constructed from segments.
    private static func octetStringContents(_ node: ASN1Node) -> [UInt8]? {
        guard node.identifier.tagClass == .universal, node.identifier.tagNumber == 4 else { return nil }
        switch node.content {
        case .primitive(let bytes):
            return Array(bytes)
        case .constructed(let children):
            var output: [UInt8] = []
            for child in children {
                guard let segment = octetStringContents(child) else { return nil }
                output += segment
            }
            return output
        }
    }

    private static func parseAttributeSet(_ bytes: [UInt8]) throws(ReceiptDecodingError) -> [ReceiptAttribute] {
        if let attributes = try attributeSetInUsualShape(bytes) { return attributes }
        let root: ASN1Node
        do {
            root = try BER.parse(bytes)
        } catch {
            throw .malformedPayload
        }
        guard root.identifier == .set, case .constructed(let children) = root.content else { throw .malformedPayload }
        var attributes: [ReceiptAttribute] = []
        for child in children {
            guard child.identifier == .sequence, case .constructed(let fields) = child.content else {
                throw .malformedPayload
            }
            var iterator = fields.makeIterator()
            guard let typeNode = iterator.next(), let versionNode = iterator.next(), let valueNode = iterator.next(),
                iterator.next() == nil,
                let type = integer(typeNode), let version = integer(versionNode),
                let value = octetStringContents(valueNode),
                let smallType = Int(exactly: type), let smallVersion = Int(exactly: version)
            else { throw .malformedPayload }
            attributes.append(ReceiptAttribute(type: smallType, version: smallVersion, value: value))
        }
        return attributes
    }

    /// ``parseAttributeSet(_:)`` for the shape every real payload has: a constructed SET of
    /// constructed SEQUENCEs of exactly a primitive INTEGER, INTEGER and OCTET STRING, with definite
    /// lengths of at most 4 bytes and nothing after the SET. `BER.parse` accepts all of these, and
    /// the checks below are the ones the general path applies to its nodes, so the result (or the
    /// error) is the same. nil means "another shape": the general path decides.
    private static func attributeSetInUsualShape(_ bytes: [UInt8]) throws(ReceiptDecodingError) -> [ReceiptAttribute]? {
        let layout: [AttributeLayout]? = bytes.withUnsafeBufferPointer { buffer in
            guard let set = DefiniteElement(buffer, at: 0, limit: buffer.count), set.identifier == 0x31, set.end == buffer.count
            else { return nil }
            var fields: [AttributeLayout] = []
            var cursor = set.contents.lowerBound
            while cursor < set.end {
                guard let sequence = DefiniteElement(buffer, at: cursor, limit: set.end), sequence.identifier == 0x30,
                    let type = DefiniteElement(buffer, at: sequence.contents.lowerBound, limit: sequence.end), type.identifier == 0x02,
                    let version = DefiniteElement(buffer, at: type.end, limit: sequence.end), version.identifier == 0x02,
                    let value = DefiniteElement(buffer, at: version.end, limit: sequence.end), value.identifier == 0x04,
                    value.end == sequence.end
                else { return nil }
                fields.append(AttributeLayout(type: type.contents, version: version.contents, value: value.contents))
                cursor = sequence.end
            }
            return fields
        }
        guard let layout else { return nil }
        var attributes: [ReceiptAttribute] = []
        attributes.reserveCapacity(layout.count)
        for field in layout {
            guard let type = integer(bytes[field.type]), let version = integer(bytes[field.version]) else { throw .malformedPayload }
            attributes.append(ReceiptAttribute(type: Int(type), version: Int(version), value: Array(bytes[field.value])))
        }
        return attributes
    }

    private static func decodeInAppPurchase(_ bytes: [UInt8]) throws(ReceiptDecodingError) -> InAppPurchase {
        var purchase = InAppPurchase(productID: "", transactionID: "", originalTransactionID: "")
        // Modelled in-app attribute types are 1701…1721: one bit each.
        var seen: UInt64 = 0
        for attribute in try parseAttributeSet(bytes) {
            let type = attribute.type
            if isModelledInAppAttribute(type) {
                let bit: UInt64 = 1 << UInt64(type - 1701)
                guard seen & bit == 0 else { throw .malformedPayload }
                seen |= bit
            }
            let value = attribute.value
            switch type {
            case ReceiptAttributeType.quantity:
                guard let quantity = try optionalInteger(value) else { break }
                guard let small = Int(exactly: quantity) else { throw .malformedPayload }
                purchase.quantity = small
            case ReceiptAttributeType.productID:
                purchase.productID = try requiredString(value)
            case ReceiptAttributeType.transactionID:
                purchase.transactionID = try requiredString(value)
            case ReceiptAttributeType.originalTransactionID:
                purchase.originalTransactionID = try requiredString(value)
            case ReceiptAttributeType.purchaseDate:
                purchase.purchaseDate = try optionalDate(value)
            case ReceiptAttributeType.inAppOriginalPurchaseDate:
                purchase.originalPurchaseDate = try optionalDate(value)
            case ReceiptAttributeType.expiresDate:
                purchase.expiresDate = try optionalDate(value)
            case ReceiptAttributeType.cancellationDate:
                purchase.cancellationDate = try optionalDate(value)
            case ReceiptAttributeType.webOrderLineItemID:
                // An INTEGER in Apple's receipts; a string is accepted so hand-made receipts still decode.
                purchase.webOrderLineItemID = try integerOrString(value)
            case ReceiptAttributeType.isTrialPeriod:
                purchase.isTrialPeriod = try (optionalInteger(value) ?? 0) != 0
            case ReceiptAttributeType.isInIntroOfferPeriod:
                purchase.isInIntroOfferPeriod = try (optionalInteger(value) ?? 0) != 0
            case ReceiptAttributeType.promotionalOfferID:
                purchase.promotionalOfferID = try optionalString(value)
            default:
                purchase.unknownAttributes.append(attribute)
            }
        }
        return purchase
    }

    /// Where an attribute's three fields' contents are.
    private struct AttributeLayout {
        var type: Range<Int>
        var version: Range<Int>
        var value: Range<Int>
    }

    /// One element with a low tag number and a definite length of at most 4 bytes, inside `limit`.
    private struct DefiniteElement {
        var identifier: UInt8
        var contents: Range<Int>
        var end: Int { contents.upperBound }

        init?(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, limit: Int) {
            guard offset + 2 <= limit else { return nil }
            identifier = bytes[offset]
            guard identifier & 0x1F != 0x1F else { return nil }
            var start = offset + 2
            var length = Int(bytes[offset + 1])
            if length >= 0x80 {
                let count = length & 0x7F
                guard (1...4).contains(count), start + count <= limit else { return nil }
                length = 0
                for index in 0..<count { length = length << 8 | Int(bytes[start + index]) }
                start += count
            }
            guard length <= limit - start else { return nil }
            contents = start..<(start + length)
        }
    }

    // MARK: Attribute values (each value is itself one DER element inside the OCTET STRING)

    private static func element(_ value: [UInt8]) throws(ReceiptDecodingError) -> ASN1Node {
        do {
            return try BER.parse(value)
        } catch {
            throw .malformedPayload
        }
    }

    /// A value in the shape nearly all are in: exactly one primitive element, with a low tag
    /// number and a definite length of at most 4 bytes. For those, `BER.parse` would return a
    /// `.primitive` node with these very identifier and contents; nil means "not that shape", and
    /// the caller asks `BER.parse` (which decides every other case, errors included).
    private static func primitiveElement(_ value: [UInt8]) -> (identifier: UInt8, contents: ArraySlice<UInt8>)? {
        value.withUnsafeBufferPointer { bytes -> (UInt8, ArraySlice<UInt8>)? in
            guard bytes.count >= 2 else { return nil }
            let identifier = bytes[0]
            // Not constructed, not the high-tag-number form, not [UNIVERSAL 0] (which BER.parse rejects).
            guard identifier & 0x20 == 0, identifier & 0x1F != 0x1F, identifier != 0 else { return nil }
            var start = 2
            var length = Int(bytes[1])
            if length >= 0x80 {
                let count = length & 0x7F
                guard (1...4).contains(count), bytes.count >= 2 + count else { return nil }
                length = 0
                for index in 0..<count { length = length << 8 | Int(bytes[2 + index]) }
                start += count
            }
            guard bytes.count - start == length else { return nil }
            return (identifier, value[start...])
        }
    }

    /// UTF8String, IA5String, PrintableString or VisibleString; nil for an empty OCTET STRING.
    private static func optionalString(_ value: [UInt8]) throws(ReceiptDecodingError) -> String? {
        guard !value.isEmpty else { return nil }
        if let (identifier, contents) = primitiveElement(value) {
            // Universal class (top bits 00) and one of the four string tags.
            guard [12, 19, 22, 26].contains(identifier), let text = String(wellFormedUTF8: contents) else {
                throw .malformedPayload
            }
            return text
        }
        let node = try element(value)
        guard node.identifier.tagClass == .universal, [12, 19, 22, 26].contains(node.identifier.tagNumber),
            case .primitive(let bytes) = node.content,
            let text = String(wellFormedUTF8: bytes[...])
        else { throw .malformedPayload }
        return text
    }

    private static func requiredString(_ value: [UInt8]) throws(ReceiptDecodingError) -> String {
        try optionalString(value) ?? ""
    }

    /// Empty strings (Apple writes them for absent expiry/cancellation dates) are nil.
    private static func optionalDate(_ value: [UInt8]) throws(ReceiptDecodingError) -> Date? {
        guard let text = try optionalString(value), !text.isEmpty else { return nil }
        guard let date = ReceiptDate.parse(text) else { throw .malformedPayload }
        return date
    }

    private static func optionalInteger(_ value: [UInt8]) throws(ReceiptDecodingError) -> Int64? {
        guard !value.isEmpty else { return nil }
        if let (identifier, contents) = primitiveElement(value) {
            guard identifier == 0x02, let number = integer(contents) else { throw .malformedPayload }
            return number
        }
        guard let number = integer(try element(value)) else { throw .malformedPayload }
        return number
    }

    private static func integerOrString(_ value: [UInt8]) throws(ReceiptDecodingError) -> String? {
        guard !value.isEmpty else { return nil }
        if let (identifier, contents) = primitiveElement(value) {
            if identifier == 0x02, let number = integer(contents) { return String(number) }
            return try optionalString(value)
        }
        let node = try element(value)
        if let number = integer(node) { return String(number) }
        return try optionalString(value)
    }

    /// A two's-complement INTEGER of at most 64 bits; BER's non-minimal encodings are accepted.
    private static func integer(_ node: ASN1Node) -> Int64? {
        guard node.identifier == .integer, case .primitive(let bytes) = node.content else { return nil }
        return integer(bytes)
    }

    /// The value of an INTEGER's contents octets; nil when empty or wider than 64 bits.
    private static func integer(_ bytes: ArraySlice<UInt8>) -> Int64? {
        guard !bytes.isEmpty else { return nil }
        var significant = bytes[...]
        // Redundant sign bytes carry no value; strip them so long encodings of small numbers fit.
        while significant.count > 1 {
            let first = significant[significant.startIndex]
            let second = significant[significant.startIndex + 1]
            if (first == 0x00 && second & 0x80 == 0) || (first == 0xFF && second & 0x80 != 0) {
                significant = significant.dropFirst()
            } else {
                break
            }
        }
        guard significant.count <= 8 else { return nil }
        var value: Int64 = significant[significant.startIndex] & 0x80 != 0 ? -1 : 0
        for byte in significant { value = value << 8 | Int64(byte) }
        return value
    }
}
