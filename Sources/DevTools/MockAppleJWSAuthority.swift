import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature

/// A signing chain shaped like Apple's for App Store JWS (root → WWDR-like intermediate with
/// marker `1.2.840.113635.100.6.2.1` → leaf with marker `1.2.840.113635.100.6.11.1`, all P-256),
/// for the mock App Store, `receiptq forge --signed-transaction` and tests. Never Apple's: a
/// deployment trusts it only by putting its `root.pem` in its trust-roots directory.
public struct MockAppleJWSAuthority: Sendable {
    public var root: Certificate
    public var intermediate: Certificate
    public var leaf: Certificate
    public var leafKey: PrivateKey
    /// Kept to issue further leaves; never needed to verify.
    public var rootKey: PrivateKey
    public var intermediateKey: PrivateKey

    /// Generates a chain valid from a year ago for ten years (payloads dated in the past verify).
    /// - Parameters:
    ///   - markers: false leaves Apple's marker extensions out (for negative tests).
    ///   - leafExpiry: when the signing certificate expires, if not with the others: a past date
    ///     makes a chain like Apple's leaf of 2021–2023, good only for payloads signed before it.
    ///   - ocspURL: the OCSP responder the leaf names (as Apple's leaf names `ocsp.apple.com`), e.g.
    ///     a local `openssl ocsp` in tests; nil: none, so its revocation is not checked.
    public static func generate(
        name: String = "receiptq Mock Apple Root CA - G3 (NOT APPLE)", markers: Bool = true, leafExpiry: Date? = nil,
        ocspURL: String? = nil
    ) throws
        -> MockAppleJWSAuthority
    {
        let now = Date()
        let from = now.addingTimeInterval(-365 * 86_400)
        let to = now.addingTimeInterval(10 * 365 * 86_400)
        let rootKey = try PrivateKey.generateP256()
        let root = try CertificateFactory.selfSigned(
            CertificateRequestSpec(commonName: name, organization: "receiptq tests", isCA: true, validFrom: from, validTo: to, serial: 1),
            key: rootKey)
        let intermediateKey = try PrivateKey.generateP256()
        let intermediate = try CertificateFactory.issue(
            CertificateRequestSpec(
                commonName: "receiptq Mock Worldwide Developer Relations (NOT APPLE)", organization: "receiptq tests", isCA: true,
                validFrom: from, validTo: to, serial: 2, markerOIDs: markers ? [JWSVerifier.intermediateMarker] : []),
            publicKeyOf: intermediateKey, issuer: root, issuerKey: rootKey)
        let leafKey = try PrivateKey.generateP256()
        let leaf = try CertificateFactory.issue(
            CertificateRequestSpec(
                commonName: "receiptq Mock StoreKit Signing (NOT APPLE)", organization: "receiptq tests", isCA: false, validFrom: from,
                validTo: leafExpiry ?? to, serial: 3, markerOIDs: markers ? [JWSVerifier.leafMarker] : [], ocspURL: ocspURL),
            publicKeyOf: leafKey, issuer: intermediate, issuerKey: intermediateKey)
        return MockAppleJWSAuthority(
            root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey, rootKey: rootKey, intermediateKey: intermediateKey)
    }

    /// Loads the chain kept in `directory` (`root.pem`, `intermediate.pem`, `leaf.pem` and their
    /// `.key` files), or generates and saves one, so the mock, `forge` and a running deployment
    /// agree across runs. Only `root.pem` there is a certificate a trust directory may load.
    public static func loadOrCreate(directory: URL) throws -> MockAppleJWSAuthority {
        let names = ["root.pem", "root.key", "intermediate.pem", "intermediate.key", "leaf.pem", "leaf.key"]
        let files = names.map { directory.appendingPathComponent($0) }
        if files.allSatisfy({ FileManager.default.fileExists(atPath: $0.path) }) {
            let text = try files.map { try String(contentsOf: $0, encoding: .utf8) }
            return MockAppleJWSAuthority(
                root: try Certificate(pem: text[0]), intermediate: try Certificate(pem: text[2]), leaf: try Certificate(pem: text[4]),
                leafKey: try PrivateKey(pem: text[5]), rootKey: try PrivateKey(pem: text[1]), intermediateKey: try PrivateKey(pem: text[3]))
        }
        let authority = try generate()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let contents = [
            authority.root.pem, try authority.rootKey.pemPKCS8(), authority.intermediate.pem, try authority.intermediateKey.pemPKCS8(),
            authority.leaf.pem, try authority.leafKey.pemPKCS8(),
        ]
        for (file, text) in zip(files, contents) { try text.write(to: file, atomically: true, encoding: .utf8) }
        for file in files where file.pathExtension == "key" { chmod(file.path, 0o600) }
        return authority
    }

    /// Signs `payload` as Apple does: compact JWS, header `{"alg":"ES256","x5c":[leaf, intermediate, root]}`.
    ///
    /// Written with ``JSONWriter`` (keys sorted): the mock signs every Server API answer and
    /// notification, and `JSONEncoder` cost more than the signature.
    public func sign(_ payload: JSONValue) throws -> String {
        var writer = JSONWriter()
        writer.value(payload)
        let input = "\(headerSegment).\(Base64URL.encode(writer.bytes))"
        return "\(input).\(Base64URL.encode(try ES256.sign(Array(input.utf8), key: leafKey)))"
    }

    /// The encoded header, the same for every JWS of this chain.
    private var headerSegment: String {
        var writer = JSONWriter()
        writer.value(
            .object([
                "alg": .string("ES256"),
                "x5c": .array([leaf, intermediate, root].map { .string(Data($0.der).base64EncodedString()) }),
            ]))
        return Base64URL.encode(writer.bytes)
    }
}
