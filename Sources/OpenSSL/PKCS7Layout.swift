/// Where a PKCS#7 SignedData keeps its certificates, found by walking BER headers only (nothing is
/// decoded), and the same ContentInfo re-encoded without them.
///
/// ``PKCS7Verifier`` hands OpenSSL the certificate-free encoding (cheap to decode) and the
/// certificates from its cache (decoded once), instead of decoding every embedded certificate's
/// public key on every receipt. Any shape it does not expect makes `init` fail, and the caller then
/// takes the reference path, `d2i_PKCS7` on the original bytes.
struct PKCS7Layout {
    /// The DER of each embedded certificate, in order.
    var certificates: [Range<Int>]
    /// The first ContentInfo of the input with SignedData's `certificates [0]` field removed; every
    /// other byte is kept, and only the enclosing definite lengths are re-encoded.
    var stripped: [UInt8]

    /// More embedded certificates than this is not a receipt: the reference path handles it.
    static let maximumCertificates = 8

    /// 1.2.840.113549.1.7.2 (signedData), with its tag and length.
    private static let signedDataOID: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]

    init?(_ bytes: UnsafeBufferPointer<UInt8>) {
        let reader = BERReader(bytes: bytes)
        // ContentInfo ::= SEQUENCE { contentType OID, content [0] EXPLICIT SignedData }
        guard let contentInfo = reader.element(at: 0, limit: bytes.count), contentInfo.identifier == 0x30,
            let contentInfoFields = reader.children(of: contentInfo), contentInfoFields.count == 2,
            reader.bytes(of: contentInfoFields[0]).elementsEqual(Self.signedDataOID),
            contentInfoFields[1].identifier == 0xA0,
            let explicit = reader.children(of: contentInfoFields[1]), explicit.count == 1, explicit[0].identifier == 0x30,
            // SignedData ::= SEQUENCE { version, digestAlgorithms, contentInfo, certificates [0] IMPLICIT, ... }
            let signedDataFields = reader.children(of: explicit[0]), signedDataFields.count >= 5,
            signedDataFields[3].identifier == 0xA0,
            let certificates = reader.children(of: signedDataFields[3]),
            (1...Self.maximumCertificates).contains(certificates.count),
            certificates.allSatisfy({ $0.identifier == 0x30 })
        else { return nil }
        self.certificates = certificates.map { $0.start..<$0.end }

        let signedData = reader.reencode(explicit[0], without: signedDataFields[3])
        let content = reader.reencode(contentInfoFields[1], replacing: explicit[0], with: signedData)
        stripped = reader.reencode(contentInfo, replacing: contentInfoFields[1], with: content)
    }
}

/// One BER element: identifier (low-tag-number form only), length, contents.
struct BERElement {
    var start: Int
    var identifier: UInt8
    var contentStart: Int
    var contentEnd: Int
    var end: Int
    var indefinite: Bool
}

/// A bounds-checked walker over BER headers.
struct BERReader {
    let bytes: UnsafeBufferPointer<UInt8>

    /// OpenSSL's own limit on nested constructed encodings (`ASN1_MAX_CONSTRUCTED_NEST`).
    static let maximumDepth = 30

    /// The element starting at `offset` and ending at or before `limit`; nil when it does not fit,
    /// uses a form PKCS#7 never needs (high tag numbers, lengths over 4 bytes), or nests too deep.
    func element(at offset: Int, limit: Int, depth: Int = 0) -> BERElement? {
        guard depth <= Self.maximumDepth, offset >= 0, limit <= bytes.count, offset + 2 <= limit else { return nil }
        let identifier = bytes[offset]
        guard identifier & 0x1F != 0x1F, identifier != 0 else { return nil }
        var cursor = offset + 1
        let first = bytes[cursor]
        cursor += 1
        if first == 0x80 {
            // Indefinite length: constructed only; contents run to the end-of-contents octets.
            guard identifier & 0x20 != 0 else { return nil }
            let contentStart = cursor
            while true {
                guard cursor + 2 <= limit else { return nil }
                if bytes[cursor] == 0, bytes[cursor + 1] == 0 {
                    return BERElement(
                        start: offset, identifier: identifier, contentStart: contentStart, contentEnd: cursor, end: cursor + 2,
                        indefinite: true)
                }
                guard let child = element(at: cursor, limit: limit, depth: depth + 1) else { return nil }
                cursor = child.end
            }
        }
        var length = 0
        if first < 0x80 {
            length = Int(first)
        } else {
            let count = Int(first & 0x7F)
            guard count <= 4, cursor + count <= limit else { return nil }
            for _ in 0..<count {
                length = length << 8 | Int(bytes[cursor])
                cursor += 1
            }
        }
        guard length <= limit - cursor else { return nil }
        return BERElement(
            start: offset, identifier: identifier, contentStart: cursor, contentEnd: cursor + length, end: cursor + length,
            indefinite: false)
    }

    /// The elements inside a constructed element; nil when any of them does not parse.
    func children(of parent: BERElement) -> [BERElement]? {
        guard parent.identifier & 0x20 != 0 else { return nil }
        var result: [BERElement] = []
        var cursor = parent.contentStart
        while cursor < parent.contentEnd {
            guard let child = element(at: cursor, limit: parent.contentEnd) else { return nil }
            result.append(child)
            cursor = child.end
        }
        return result
    }

    func bytes(of element: BERElement) -> UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(rebasing: bytes[element.start..<element.end])
    }

    /// `parent` with its child `child` left out.
    func reencode(_ parent: BERElement, without child: BERElement) -> [UInt8] {
        reencode(parent, replacing: child, with: [])
    }

    /// `parent` with its child `child` replaced by `replacement`: same identifier, same contents
    /// around the child, and the same length form (indefinite stays indefinite; a definite length is
    /// written in its minimal form).
    func reencode(_ parent: BERElement, replacing child: BERElement, with replacement: [UInt8]) -> [UInt8] {
        let before = bytes[parent.contentStart..<child.start]
        let after = bytes[child.end..<parent.contentEnd]
        let contentLength = before.count + replacement.count + after.count
        var output: [UInt8] = []
        output.reserveCapacity(contentLength + 8)
        output.append(parent.identifier)
        if parent.indefinite {
            output.append(0x80)
        } else if contentLength < 0x80 {
            output.append(UInt8(contentLength))
        } else {
            let byteCount = (Int.bitWidth - contentLength.leadingZeroBitCount + 7) / 8
            output.append(0x80 | UInt8(byteCount))
            for index in stride(from: byteCount - 1, through: 0, by: -1) {
                output.append(UInt8(truncatingIfNeeded: contentLength >> (index * 8)))
            }
        }
        output.append(contentsOf: before)
        output.append(contentsOf: replacement)
        output.append(contentsOf: after)
        if parent.indefinite { output.append(contentsOf: [0, 0]) }
        return output
    }
}
