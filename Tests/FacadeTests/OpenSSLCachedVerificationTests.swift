import DevTools
import Foundation
import OpenSSL
import SystemTesting
import Testing

/// Root → intermediate → leaf, and a second intermediate with the same name and key but another
/// validity period (as Apple re-issued its WWDR CA), so that which issuer OpenSSL picks depends on
/// the verification time.
private final class CachePKI: Sendable {
    static let shared: CachePKI? = try? CachePKI()

    let rootKey: PrivateKey
    let root: Certificate
    let intermediateKey: PrivateKey
    /// Valid from 4 years ago to 2 years ago.
    let oldIntermediate: Certificate
    /// Valid from 3 years ago to 3 years ahead.
    let newIntermediate: Certificate
    let leafKey: PrivateKey
    /// Issued by the intermediates' name and key; valid from 3.5 years ago to 1 year ahead.
    let leaf: Certificate
    let otherRoot: Certificate

    static let year: TimeInterval = 365 * 86_400

    init() throws {
        let now = Date()
        let rootKey = try PrivateKey.generateRSA(bits: 2048)
        let root = try CertificateFactory.selfSigned(
            CertificateRequestSpec(
                commonName: "receiptq Cache Test Root", organization: "receiptq tests", isCA: true,
                validFrom: now - 10 * Self.year, validTo: now + 10 * Self.year, serial: 1),
            key: rootKey)
        let intermediateKey = try PrivateKey.generateRSA(bits: 2048)
        func intermediate(from: Date, to: Date, serial: UInt64) throws -> Certificate {
            try CertificateFactory.issue(
                CertificateRequestSpec(
                    commonName: "receiptq Cache Test Intermediate", organization: "receiptq tests", isCA: true, validFrom: from,
                    validTo: to, serial: serial),
                publicKeyOf: intermediateKey, issuer: root, issuerKey: rootKey)
        }
        (self.rootKey, self.root, self.intermediateKey) = (rootKey, root, intermediateKey)
        oldIntermediate = try intermediate(from: now - 4 * Self.year, to: now - 2 * Self.year, serial: 2)
        newIntermediate = try intermediate(from: now - 3 * Self.year, to: now + 3 * Self.year, serial: 3)
        let leafKey = try PrivateKey.generateRSA(bits: 2048)
        self.leafKey = leafKey
        leaf = try CertificateFactory.issue(
            CertificateRequestSpec(
                commonName: "receiptq Cache Test Signer", organization: "receiptq tests", isCA: false,
                validFrom: now - 3.5 * Self.year, validTo: now + Self.year, serial: 4),
            publicKeyOf: leafKey, issuer: oldIntermediate, issuerKey: intermediateKey)
        let otherKey = try PrivateKey.generateRSA(bits: 2048)
        otherRoot = try CertificateFactory.selfSigned(CertificateRequestSpec(commonName: "Unrelated Root", isCA: true), key: otherKey)
    }

    /// Instants around every validity boundary of the hierarchy, plus now and "now" (nil).
    var interestingTimes: [Date?] {
        let boundaries = [root, oldIntermediate, newIntermediate, leaf].flatMap { [$0.notBefore, $0.notAfter] }
        return [nil, Date()] + boundaries.flatMap { [$0 - 1, $0, $0 + 1] }
    }
}

private func cachePKI() throws -> CachePKI {
    try #require(CachePKI.shared, "could not build the test PKI")
}

private let content: [UInt8] = [0x31, 0x03, 0x02, 0x01, 0x05] + Array("receiptq cached verification".utf8)

/// Re-encodes a DER ContentInfo so that it, its `[0]`, the SignedData, its encapsulated content
/// info and its certificate set use BER indefinite lengths, as Xcode's receipts do; `edit` may then
/// rearrange the SignedData's fields (each one's full encoding).
private func indefiniteForm(_ der: [UInt8], editingSignedData edit: ([[UInt8]]) -> [[UInt8]] = { $0 }) -> [UInt8]? {
    func element(_ bytes: ArraySlice<UInt8>) -> (identifier: UInt8, content: ArraySlice<UInt8>, end: Int)? {
        var index = bytes.startIndex
        guard bytes.count >= 2 else { return nil }
        let identifier = bytes[index]
        index += 1
        var length = Int(bytes[index])
        index += 1
        if length >= 0x80 {
            let count = length & 0x7F
            length = 0
            for _ in 0..<count {
                length = length << 8 | Int(bytes[index])
                index += 1
            }
        }
        guard index + length <= bytes.endIndex else { return nil }
        return (identifier, bytes[index..<(index + length)], index + length)
    }
    func children(_ node: ArraySlice<UInt8>) -> (identifier: UInt8, children: [ArraySlice<UInt8>])? {
        guard let parsed = element(node) else { return nil }
        var result: [ArraySlice<UInt8>] = []
        var rest = parsed.content
        while !rest.isEmpty {
            guard let child = element(rest) else { return nil }
            result.append(rest[rest.startIndex..<child.end])
            rest = rest[child.end...]
        }
        return (parsed.identifier, result)
    }
    func indefinite(_ identifier: UInt8, _ parts: [[UInt8]]) -> [UInt8] {
        [identifier, 0x80] + parts.flatMap { $0 } + [0, 0]
    }
    guard let contentInfo = children(der[...]), contentInfo.children.count == 2,
        let explicit = children(contentInfo.children[1]), explicit.children.count == 1,
        let signedData = children(explicit.children[0])
    else { return nil }
    var fields: [[UInt8]] = []
    for (index, field) in signedData.children.enumerated() {
        if index == 2 || index == 3 {
            guard let inner = children(field) else { return nil }
            fields.append(indefinite(inner.identifier, inner.children.map { Array($0) }))
        } else {
            fields.append(Array(field))
        }
    }
    let signed = indefinite(signedData.identifier, edit(fields))
    return indefinite(contentInfo.identifier, [Array(contentInfo.children[0]), indefinite(explicit.identifier, [signed])])
}

@Suite("OpenSSL façade: cached PKCS#7 verification matches the reference path", .blockingWork)
struct OpenSSLCachedVerificationTests {
    /// Both paths on `der`; they must agree exactly.
    private func compare(
        _ verifier: PKCS7Verifier, _ der: [UInt8], at time: Date?, _ label: String, sourceLocation: SourceLocation = #_sourceLocation
    ) -> PKCS7.Verification {
        let reference = PKCS7.verify(
            der: der, trustedRoots: verifier.trustedRoots, intermediates: verifier.intermediates, at: time,
            checkPurpose: verifier.checkPurpose)
        let cached = verifier.verify(der: der, at: time)
        let again = verifier.verify(der: der, at: time)
        #expect(cached == reference, "\(label) at \(time.map { "\($0)" } ?? "now")", sourceLocation: sourceLocation)
        #expect(again == reference, "\(label) at \(time.map { "\($0)" } ?? "now"), second call", sourceLocation: sourceLocation)
        return reference
    }

    @Test("every validity boundary, chains through either intermediate, embedded or offered", arguments: [PKCS7.DigestAlgorithm.sha1, .sha256])
    func boundaries(digest: PKCS7.DigestAlgorithm) throws {
        let pki = try cachePKI()
        let withChain = try PKCS7.sign(
            content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.oldIntermediate, pki.root], digest: digest)
        let leafOnly = try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [], digest: digest)
        let verifiers = [
            PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.oldIntermediate, pki.newIntermediate]),
            PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.newIntermediate, pki.oldIntermediate]),
            PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.newIntermediate]),
            PKCS7Verifier(trustedRoots: [pki.root]),
            PKCS7Verifier(trustedRoots: [pki.root], checkPurpose: false),
            PKCS7Verifier(trustedRoots: [pki.otherRoot], intermediates: [pki.newIntermediate]),
            PKCS7Verifier(trustedRoots: []),
        ]
        var reasons = Set<String>()
        for (index, verifier) in verifiers.enumerated() {
            for (name, der) in [("embedded chain", withChain), ("leaf only", leafOnly), ("indefinite", try #require(indefiniteForm(withChain)))] {
                for time in pki.interestingTimes {
                    reasons.insert(compare(verifier, der, at: time, "verifier \(index), \(name)").reason ?? "valid")
                }
            }
        }
        // The boundaries are really exercised: every outcome occurs.
        #expect(reasons == ["valid", "certificate_expired", "certificate_not_yet_valid", "untrusted_chain"])
    }

    @Test("when the first candidate issuer has expired, OpenSSL picks the other one, and so does the cache")
    func issuerChosenByTime() throws {
        let pki = try cachePKI()
        let der = try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [], digest: .sha256)
        let verifier = PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.oldIntermediate, pki.newIntermediate])
        // 3.2 years ago both intermediates are valid; now only the new one is.
        let thenResult = compare(verifier, der, at: Date() - 3.2 * CachePKI.year, "both valid")
        let nowResult = compare(verifier, der, at: Date(), "only the new one valid")
        #expect(thenResult.valid && nowResult.valid)
        #expect(verifier.statistics.referencePath == 0)
    }

    @Test("the embedded content of the indefinite form is the same, and it takes the cached path")
    func indefiniteLengths() throws {
        let pki = try cachePKI()
        let der = try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.newIntermediate], digest: .sha256)
        let ber = try #require(indefiniteForm(der))
        #expect(ber != der)
        let verifier = PKCS7Verifier(trustedRoots: [pki.root])
        let result = compare(verifier, ber, at: Date(), "indefinite")
        #expect(result.valid)
        #expect(result.content == content)
        #expect(result.signerCommonName == "receiptq Cache Test Signer")
        #expect(verifier.statistics == PKCS7Verifier.Statistics(fastPath: 2, referencePath: 0))
    }

    @Test("odd SignedData shapes (certificates missing, repeated, reordered, not certificates) read as before")
    func oddShapes() throws {
        let pki = try cachePKI()
        let der = try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.newIntermediate], digest: .sha256)
        let integer: [UInt8] = [0x02, 0x01, 0x05]
        let edits: [(String, ([[UInt8]]) -> [[UInt8]])] = [
            ("as is", { $0 }),
            ("certificates repeated", { Array($0[0...3]) + [$0[3]] + Array($0[4...]) }),
            ("certificates left out", { Array($0[0...2]) + Array($0[4...]) }),
            (
                "certificates reversed",
                { fields in
                    var certificates = fields[3]
                    // [0] 80 <leaf> <intermediate> 00 00: swap the two certificates.
                    let leaf = pki.leaf.der
                    let intermediate = pki.newIntermediate.der
                    if certificates == [0xA0, 0x80] + leaf + intermediate + [0, 0] || certificates == [0xA0, 0x80] + intermediate + leaf + [0, 0] {
                        certificates =
                            certificates.starts(with: [0xA0, 0x80] + leaf)
                            ? [0xA0, 0x80] + intermediate + leaf + [0, 0] : [0xA0, 0x80] + leaf + intermediate + [0, 0]
                    }
                    return Array(fields[0...2]) + [certificates] + Array(fields[4...])
                }
            ),
            ("an INTEGER among the certificates", { Array($0[0...2]) + [Array($0[3].dropLast(2)) + integer + [0, 0]] + Array($0[4...]) }),
            ("no certificate at all", { Array($0[0...2]) + [[0xA0, 0x80, 0, 0]] + Array($0[4...]) }),
            ("empty CRLs", { Array($0[0...3]) + [[0xA1, 0x80, 0, 0]] + Array($0[4...]) }),
            ("a field after the signer infos", { $0 + [integer] }),
        ]
        for (label, edit) in edits {
            let ber = try #require(indefiniteForm(der, editingSignedData: edit), "\(label)")
            for verifier in [PKCS7Verifier(trustedRoots: [pki.root]), PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.leaf])] {
                _ = compare(verifier, ber, at: nil, label)
            }
        }
        let repeated = try #require(indefiniteForm(der) { Array($0[0...3]) + [$0[3]] + Array($0[4...]) })
        #expect(PKCS7Verifier(trustedRoots: [pki.root]).verify(der: repeated, at: nil).reason == "malformed")
    }

    @Test("CachedChainVerifier answers as ChainVerifier, at every boundary")
    func cachedChainVerifier() throws {
        let pki = try cachePKI()
        let intermediateSets = [[pki.oldIntermediate, pki.newIntermediate], [pki.newIntermediate, pki.oldIntermediate], [pki.newIntermediate], []]
        for intermediates in intermediateSets {
            for roots in [[pki.root], [pki.otherRoot]] {
                let verifier = CachedChainVerifier(intermediates: intermediates, trustedRoots: roots)
                let leaf = try #require(verifier.leaf(der: pki.leaf.der))
                for time in pki.interestingTimes {
                    let expected = ChainVerifier.verify(pki.leaf, intermediates: intermediates, trustedRoots: roots, at: time)
                    for call in 1...2 {
                        let cached = verifier.verify(leaf, at: time)
                        #expect(cached == expected, "\(intermediates.count) intermediates, at \(time.map { "\($0)" } ?? "now"), call \(call)")
                    }
                }
            }
        }
        let verifier = CachedChainVerifier(intermediates: [], trustedRoots: [pki.root])
        #expect(verifier.leaf(der: []) == nil)
        #expect(verifier.leaf(der: [0x30, 0x03, 0x02, 0x01]) == nil)
        #expect(verifier.leaf(der: pki.leaf.der + [0]) == nil)
        #expect(verifier.leaf(der: pki.leaf.der)?.certificate.der == pki.leaf.der)
    }

    @Test("a changed byte anywhere gives the reference path's result", arguments: [false, true])
    func everyByteFlipped(indefinite: Bool) throws {
        let pki = try cachePKI()
        var der = try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.newIntermediate], digest: .sha256)
        if indefinite { der = try #require(indefiniteForm(der)) }
        let cache = PKCS7VerificationCache(certificateCapacity: 16, protectedCertificateCapacity: 4, chainCapacity: 8)
        let verifier = PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.oldIntermediate], cache: cache)
        var outcomes = Set<String>()
        for offset in stride(from: 0, to: der.count, by: 3) {
            var mutated = der
            mutated[offset] ^= offset % 2 == 0 ? 0x01 : 0x80
            outcomes.insert(compare(verifier, mutated, at: Date(), "byte \(offset)").reason ?? "valid")
        }
        #expect(outcomes.isSuperset(of: ["malformed", "signature_mismatch"]))
        let counts = cache.counts
        #expect(counts.certificates <= 16 && counts.protectedCertificates <= 4 && counts.chains <= 8)
    }

    @Test("garbage and truncations never crash and read as before")
    func garbage() throws {
        let pki = try cachePKI()
        let der = try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.newIntermediate], digest: .sha1)
        let verifier = PKCS7Verifier(trustedRoots: [pki.root])
        var inputs: [[UInt8]] = [[], [0x30], [0x30, 0x80], [0x30, 0x80, 0x00, 0x00], [0x00, 0x00], Array("hello".utf8), pki.root.der]
        inputs += stride(from: 1, to: der.count, by: 17).map { Array(der.prefix($0)) }
        inputs.append(der + [0x00, 0x01, 0x02])
        for (index, input) in inputs.enumerated() {
            _ = compare(verifier, input, at: nil, "input \(index)")
        }
    }

    @Test("a small cache stays within its bounds and keeps giving the same results")
    func boundedCache() throws {
        let pki = try cachePKI()
        let cache = PKCS7VerificationCache(certificateCapacity: 3, protectedCertificateCapacity: 2, chainCapacity: 2)
        let verifier = PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.newIntermediate], cache: cache)
        var receipts: [[UInt8]] = []
        for serial in 10..<18 {
            let signer = try CertificateFactory.issue(
                CertificateRequestSpec(commonName: "Signer \(serial)", isCA: false, serial: UInt64(serial)),
                publicKeyOf: pki.leafKey, issuer: pki.newIntermediate, issuerKey: pki.intermediateKey)
            receipts.append(try PKCS7.sign(content: content, signer: signer, key: pki.leafKey, chain: [], digest: .sha256))
        }
        for round in 0..<2 {
            for (index, der) in receipts.enumerated() {
                #expect(compare(verifier, der, at: nil, "round \(round), receipt \(index)").valid)
                let counts = cache.counts
                #expect(counts.certificates <= 3 && counts.protectedCertificates <= 2 && counts.chains <= 2, "\(counts)")
            }
        }
        #expect(verifier.statistics.referencePath == 0)
    }

    @Test("8 tasks verifying at once share the caches safely")
    func concurrent() async throws {
        let pki = try cachePKI()
        let cache = PKCS7VerificationCache(certificateCapacity: 4, protectedCertificateCapacity: 2, chainCapacity: 4)
        let verifier = PKCS7Verifier(trustedRoots: [pki.root], intermediates: [pki.newIntermediate], cache: cache)
        var receipts: [[UInt8]] = []
        for digest in [PKCS7.DigestAlgorithm.sha1, .sha256] {
            receipts.append(try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.oldIntermediate], digest: digest))
            receipts.append(try PKCS7.sign(content: content, signer: pki.leaf, key: pki.leafKey, chain: [], digest: digest))
        }
        receipts.append(try #require(indefiniteForm(receipts[0])))
        var tampered = receipts[1]
        tampered[tampered.count / 2] ^= 0x01
        receipts.append(tampered)
        let times: [Date?] = [nil, Date() - 3.2 * CachePKI.year, Date() + 2 * CachePKI.year]
        let cases = receipts.flatMap { der in times.map { (der, $0) } }
        let expected = cases.map { PKCS7.verify(der: $0.0, trustedRoots: [pki.root], intermediates: [pki.newIntermediate], at: $0.1) }
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var mismatches = 0
                    for round in 0..<10 {
                        for offset in cases.indices {
                            let index = (offset + task * 3 + round) % cases.count
                            if verifier.verify(der: cases[index].0, at: cases[index].1) != expected[index] { mismatches += 1 }
                        }
                    }
                    return mismatches
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0)
        #expect(verifier.statistics.fastPath > 0)
    }
}
