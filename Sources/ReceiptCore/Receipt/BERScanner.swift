/// Every element of a BER encoding, in the order `BER.parse` visits them, found without building
/// `ASN1Node`s (no reference counting, one allocation), for ``ReceiptDecoder/signedContent(ofPKCS7:)``.
///
/// It accepts a subset of what SwiftASN1's BER parser accepts: identifiers with a low tag number
/// (not `[UNIVERSAL 0]`), definite lengths of at most 4 bytes or indefinite lengths on constructed
/// elements, at most 50 levels deep, and nothing after the first element. Everything in that subset
/// `BER.parse` parses into the same tree. For anything else (long-form tags, 5–8-byte lengths,
/// errors) `init` returns nil and the caller asks `BER.parse`, which decides, errors included.
struct BERScanner {
    /// One element: its identifier byte, depth (1 for the root, as in SwiftASN1) and contents.
    struct Node {
        var identifier: UInt8
        var depth: Int
        var contents: Range<Int>

        var isConstructed: Bool { identifier & 0x20 != 0 }
        /// Class and tag number, ignoring the constructed bit (what `ASN1Identifier` compares).
        var tag: UInt8 { identifier & 0xDF }
    }

    /// SwiftASN1's `ParseResult._maximumNodeDepth`.
    static let maximumDepth = 50

    private(set) var nodes: [Node] = []

    init?(_ bytes: UnsafeBufferPointer<UInt8>) {
        nodes.reserveCapacity(bytes.count / 8)
        guard let end = scan(bytes, at: 0, limit: bytes.count, depth: 1), end == bytes.count else { return nil }
    }

    /// Scans the element at `offset`, appending it and its descendants; returns where it ends.
    private mutating func scan(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, limit: Int, depth: Int) -> Int? {
        guard depth <= Self.maximumDepth, offset + 2 <= limit else { return nil }
        let identifier = bytes[offset]
        guard identifier & 0x1F != 0x1F, identifier & 0xDF != 0 else { return nil }
        let constructed = identifier & 0x20 != 0
        var cursor = offset + 2
        let first = bytes[offset + 1]
        let index = nodes.count
        if first == 0x80 {
            guard constructed else { return nil }
            nodes.append(Node(identifier: identifier, depth: depth, contents: cursor..<cursor))
            while !(cursor + 2 <= limit && bytes[cursor] == 0 && bytes[cursor + 1] == 0) {
                guard let end = scan(bytes, at: cursor, limit: limit, depth: depth + 1) else { return nil }
                cursor = end
            }
            nodes[index].contents = nodes[index].contents.lowerBound..<cursor
            return cursor + 2
        }
        var length = Int(first)
        if first >= 0x80 {
            let count = Int(first & 0x7F)
            guard count <= 4, cursor + count <= limit else { return nil }
            length = 0
            for _ in 0..<count {
                length = length << 8 | Int(bytes[cursor])
                cursor += 1
            }
        }
        guard length <= limit - cursor else { return nil }
        let end = cursor + length
        nodes.append(Node(identifier: identifier, depth: depth, contents: cursor..<end))
        if constructed {
            while cursor < end {
                guard let childEnd = scan(bytes, at: cursor, limit: end, depth: depth + 1) else { return nil }
                cursor = childEnd
            }
        }
        return end
    }

    /// The indices of the children of node `index`, in order.
    func children(of index: Int) -> [Int] {
        let depth = nodes[index].depth
        var result: [Int] = []
        var next = index + 1
        while next < nodes.count, nodes[next].depth > depth {
            if nodes[next].depth == depth + 1 { result.append(next) }
            next += 1
        }
        return result
    }

    /// The first child of node `index`, if any (its successor, when deeper).
    func firstChild(of index: Int) -> Int? {
        index + 1 < nodes.count && nodes[index + 1].depth == nodes[index].depth + 1 ? index + 1 : nil
    }
}
