import BaseSupport
import Foundation
import OpenSSL
import SwiftASN1

/// What to put in a certificate made by ``CertificateFactory``.
public struct CertificateRequestSpec: Sendable {
    /// Subject common name (CN).
    public var commonName: String
    /// Subject organisation (O), omitted when nil.
    public var organization: String?
    /// Whether this is a CA: `basicConstraints CA:TRUE` and `keyUsage keyCertSign, cRLSign`;
    /// otherwise `CA:FALSE` and `keyUsage digitalSignature`.
    public var isCA: Bool
    /// Start of validity (whole seconds).
    public var validFrom: Date
    /// End of validity (whole seconds).
    public var validTo: Date
    /// Serial number (positive).
    public var serial: UInt64
    /// Dotted OIDs added as non-critical extensions whose value is an ASN.1 NULL: how Apple marks
    /// its App Store signing leaf (`1.2.840.113635.100.6.11.1`) and WWDR intermediate
    /// (`1.2.840.113635.100.6.2.1`), so a mock's certificates can be shaped like Apple's.
    public var markerOIDs: [String]
    /// The `subjectAltName` entries: DNS names, and IPv4 literals (`127.0.0.1`) as IP addresses;
    /// none: no such extension. A TLS client matches the host it dials against these.
    public var alternativeNames: [String]
    /// The OCSP responder named in the Authority Information Access extension (as Apple's
    /// certificates name `http://ocsp.apple.com/…`); nil: no such extension.
    public var ocspURL: String?

    /// Creates a spec; by default a leaf valid from an hour ago for one year, with a random serial.
    public init(
        commonName: String,
        organization: String? = nil,
        isCA: Bool = false,
        validFrom: Date = Date(timeIntervalSinceNow: -3600),
        validTo: Date = Date(timeIntervalSinceNow: 365 * 86400),
        serial: UInt64 = UInt64.random(in: 1...UInt64(Int64.max)),
        markerOIDs: [String] = [],
        alternativeNames: [String] = [],
        ocspURL: String? = nil
    ) {
        self.markerOIDs = markerOIDs
        self.commonName = commonName
        self.organization = organization
        self.isCA = isCA
        self.validFrom = validFrom
        self.validTo = validTo
        self.serial = serial
        self.alternativeNames = alternativeNames
        self.ocspURL = ocspURL
    }
}

/// Makes X.509 v3 certificates signed with SHA-256: the one certificate maker of the tests, the
/// mock App Store's Apple-shaped chains, the forger's test CA and the TLS servers of the tests.
///
/// Tooling, so it lives here and not in a production module. It writes the DER itself (swift-asn1)
/// and asks the OpenSSL façade only for what a production binary needs anyway (the key's public
/// half, a signature, parsing the result), since no module but a façade may call OpenSSL.
///
/// Each certificate gets `basicConstraints` (critical), `keyUsage` (critical), a subject key
/// identifier and an authority key identifier, which is what chain building expects.
///
/// ```swift
/// let rootKey = try PrivateKey.generateP256()
/// let root = try CertificateFactory.selfSigned(CertificateRequestSpec(commonName: "Test Root", isCA: true), key: rootKey)
/// let leafKey = try PrivateKey.generateP256()
/// let leaf = try CertificateFactory.issue(
///     CertificateRequestSpec(commonName: "Test Leaf"), publicKeyOf: leafKey, issuer: root, issuerKey: rootKey)
/// ```
public enum CertificateFactory {
    /// A self-signed certificate (a root CA when `spec.isCA`).
    ///
    /// - Throws: ``CertificateFactoryError`` for a spec it cannot encode; `OpenSSLError` when the
    ///   key cannot sign or the result cannot be read back.
    public static func selfSigned(_ spec: CertificateRequestSpec, key: PrivateKey) throws -> Certificate {
        let spki = try key.publicKey.spki
        return try build(spec, subjectKeyInfo: spki, issuerName: try name(spec), issuerKeyInfo: spki, issuerKey: key)
    }

    /// A certificate for `subjectKey`'s public key, issued and signed by `issuer`/`issuerKey`.
    ///
    /// - Throws: as ``selfSigned(_:key:)``, and ``CertificateFactoryError`` when `issuer` cannot be read.
    public static func issue(
        _ spec: CertificateRequestSpec,
        publicKeyOf subjectKey: PrivateKey,
        issuer: Certificate,
        issuerKey: PrivateKey
    ) throws -> Certificate {
        try build(
            spec, subjectKeyInfo: try subjectKey.publicKey.spki, issuerName: try subjectName(of: issuer.der),
            issuerKeyInfo: try issuer.publicKey.spki, issuerKey: issuerKey)
    }

    private static func build(
        _ spec: CertificateRequestSpec, subjectKeyInfo: [UInt8], issuerName: [UInt8], issuerKeyInfo: [UInt8], issuerKey: PrivateKey
    ) throws -> Certificate {
        let algorithm = try signatureAlgorithm(issuerKeyInfo: issuerKeyInfo)
        var tbs = DER.Serializer()
        try tbs.appendConstructedNode(identifier: .sequence) { certificate in
            // Version 3 (encoded as 2).
            try certificate.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { try $0.serialize(2) }
            try certificate.serialize(spec.serial)
            certificate.serializeRawBytes(algorithm)
            certificate.serializeRawBytes(issuerName)
            try certificate.appendConstructedNode(identifier: .sequence) { validity in
                try serializeTime(spec.validFrom, into: &validity)
                try serializeTime(spec.validTo, into: &validity)
            }
            certificate.serializeRawBytes(try name(spec))
            certificate.serializeRawBytes(subjectKeyInfo)
            try certificate.serialize(explicitlyTaggedWithTagNumber: 3, tagClass: .contextSpecific) { tagged in
                try tagged.appendConstructedNode(identifier: .sequence) { extensions in
                    try serializeExtensions(spec, subjectKeyInfo: subjectKeyInfo, issuerKeyInfo: issuerKeyInfo, into: &extensions)
                }
            }
        }
        let signature = try issuerKey.signatureSHA256(tbs.serializedBytes)
        var certificate = DER.Serializer()
        try certificate.appendConstructedNode(identifier: .sequence) { outer in
            outer.serializeRawBytes(tbs.serializedBytes)
            outer.serializeRawBytes(algorithm)
            try outer.serialize(ASN1BitString(bytes: signature[...]))
        }
        return try Certificate(der: certificate.serializedBytes)
    }

    private static func serializeExtensions(
        _ spec: CertificateRequestSpec, subjectKeyInfo: [UInt8], issuerKeyInfo: [UInt8], into extensions: inout DER.Serializer
    ) throws {
        // basicConstraints: `cA` is DEFAULT FALSE, so a leaf's is the empty SEQUENCE.
        try serializeExtension("2.5.29.19", critical: true, into: &extensions) { value in
            try value.appendConstructedNode(identifier: .sequence) { if spec.isCA { try $0.serialize(true) } }
        }
        // keyUsage: keyCertSign (bit 5) and cRLSign (bit 6), or digitalSignature (bit 0); DER drops
        // the unused trailing bits.
        try serializeExtension("2.5.29.15", critical: true, into: &extensions) { value in
            try value.serialize(spec.isCA ? ASN1BitString(bytes: [0x06], paddingBits: 1) : ASN1BitString(bytes: [0x80], paddingBits: 7))
        }
        // Subject key id first: for a self-signed certificate the authority key id repeats it.
        try serializeExtension("2.5.29.14", critical: false, into: &extensions) { value in
            try value.serialize(ASN1OctetString(contentBytes: try keyIdentifier(subjectKeyInfo)[...]))
        }
        try serializeExtension("2.5.29.35", critical: false, into: &extensions) { value in
            // keyIdentifier [0] IMPLICIT OCTET STRING.
            try value.appendConstructedNode(identifier: .sequence) { try serializeTagged(try keyIdentifier(issuerKeyInfo), tag: 0, into: &$0) }
        }
        if !spec.alternativeNames.isEmpty {
            try serializeExtension("2.5.29.17", critical: false, into: &extensions) { value in
                try value.appendConstructedNode(identifier: .sequence) { names in
                    // GeneralName: iPAddress [7] IMPLICIT OCTET STRING, dNSName [2] IMPLICIT IA5String.
                    for name in spec.alternativeNames {
                        if let address = ipv4Bytes(name) {
                            try serializeTagged(address, tag: 7, into: &names)
                        } else {
                            try serializeTagged(Array(name.utf8), tag: 2, into: &names)
                        }
                    }
                }
            }
        }
        for oid in spec.markerOIDs {
            try serializeExtension(oid, critical: false, into: &extensions) { try $0.serialize(ASN1Null()) }
        }
        if let ocspURL = spec.ocspURL {
            // authorityInfoAccess: SEQUENCE OF AccessDescription { id-ad-ocsp, uniformResourceIdentifier [6] IA5String }.
            try serializeExtension("1.3.6.1.5.5.7.1.1", critical: false, into: &extensions) { value in
                try value.appendConstructedNode(identifier: .sequence) { descriptions in
                    try descriptions.appendConstructedNode(identifier: .sequence) { description in
                        try description.serialize(try objectIdentifier("1.3.6.1.5.5.7.48.1"))
                        try serializeTagged(Array(ocspURL.utf8), tag: 6, into: &description)
                    }
                }
            }
        }
    }

    /// `Extension ::= SEQUENCE { extnID, critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING }`,
    /// the value being the DER `writeValue` writes.
    private static func serializeExtension(
        _ oid: String, critical: Bool, into extensions: inout DER.Serializer, _ writeValue: (inout DER.Serializer) throws -> Void
    ) throws {
        var value = DER.Serializer()
        try writeValue(&value)
        try extensions.appendConstructedNode(identifier: .sequence) { item in
            try item.serialize(try objectIdentifier(oid))
            if critical { try item.serialize(true) }
            try item.serialize(ASN1OctetString(contentBytes: value.serializedBytes[...]))
        }
    }

    /// `bytes` as a primitive `[tag] IMPLICIT` context-specific field.
    private static func serializeTagged(_ bytes: [UInt8], tag: UInt, into serializer: inout DER.Serializer) throws {
        try ASN1OctetString(contentBytes: bytes[...]).serialize(
            into: &serializer, withIdentifier: ASN1Identifier(tagWithNumber: tag, tagClass: .contextSpecific))
    }

    /// The subject or issuer `Name`: O (when given), then CN, as UTF8Strings.
    private static func name(_ spec: CertificateRequestSpec) throws -> [UInt8] {
        let attributes = [spec.organization.map { ("2.5.4.10", $0) }, ("2.5.4.3", spec.commonName)].compactMap { $0 }
        var name = DER.Serializer()
        try name.appendConstructedNode(identifier: .sequence) { sequence in
            for (oid, text) in attributes {
                try sequence.appendConstructedNode(identifier: .set) { set in
                    try set.appendConstructedNode(identifier: .sequence) { attribute in
                        try attribute.serialize(try objectIdentifier(oid))
                        try attribute.serialize(ASN1UTF8String(text))
                    }
                }
            }
        }
        return name.serializedBytes
    }

    /// RFC 5280's rule: UTCTime for the years 1950 to 2049, GeneralizedTime otherwise.
    private static func serializeTime(_ date: Date, into serializer: inout DER.Serializer) throws {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = CivilDate.fields(days: days)
        let (hours, minutes, second) = (secondOfDay / 3600, secondOfDay / 60 % 60, secondOfDay % 60)
        if (1950...2049).contains(year) {
            try serializer.serialize(try UTCTime(year: year, month: month, day: day, hours: hours, minutes: minutes, seconds: second))
        } else {
            try serializer.serialize(
                try GeneralizedTime(year: year, month: month, day: day, hours: hours, minutes: minutes, seconds: second, fractionalSeconds: 0))
        }
    }

    /// The signature `AlgorithmIdentifier` for the issuer's key: ecdsa-with-SHA256 (no parameters)
    /// or sha256WithRSAEncryption (a NULL parameter), as the key's `SubjectPublicKeyInfo` names it.
    private static func signatureAlgorithm(issuerKeyInfo: [UInt8]) throws -> [UInt8] {
        let keyAlgorithm = try DER.sequence(DER.parse(issuerKeyInfo), identifier: .sequence) { nodes in
            guard let algorithm = nodes.next() else { throw CertificateFactoryError("an empty SubjectPublicKeyInfo") }
            _ = nodes.next()
            return try DER.sequence(algorithm, identifier: .sequence) { parts in
                let oid = try ASN1ObjectIdentifier(derEncoded: &parts)
                while parts.next() != nil {}
                return oid
            }
        }
        var identifier = DER.Serializer()
        try identifier.appendConstructedNode(identifier: .sequence) { sequence in
            switch keyAlgorithm {
            case try objectIdentifier("1.2.840.10045.2.1"):
                try sequence.serialize(try objectIdentifier("1.2.840.10045.4.3.2"))
            case try objectIdentifier("1.2.840.113549.1.1.1"):
                try sequence.serialize(try objectIdentifier("1.2.840.113549.1.1.11"))
                try sequence.serialize(ASN1Null())
            default:
                throw CertificateFactoryError("a key of algorithm \(keyAlgorithm), neither EC nor RSA")
            }
        }
        return identifier.serializedBytes
    }

    /// RFC 5280's key identifier (method 1): the SHA-1 of the public key's bits, which is also
    /// what OpenSSL's `subjectKeyIdentifier = hash` writes.
    private static func keyIdentifier(_ keyInfo: [UInt8]) throws -> [UInt8] {
        let key = try DER.sequence(DER.parse(keyInfo), identifier: .sequence) { nodes in
            _ = nodes.next()
            return try ASN1BitString(derEncoded: &nodes)
        }
        return Digest.sha1(key.bytes)
    }

    /// The DER of `certificate`'s subject `Name`, to name it as the issuer of another.
    private static func subjectName(of certificate: [UInt8]) throws -> [UInt8] {
        guard let tbs = try children(of: DER.parse(certificate)).first else { throw CertificateFactoryError("an empty certificate") }
        // version [0] (optional), serialNumber, signature, issuer, validity, subject, …
        var fields = try children(of: tbs)
        if fields.first?.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) { fields.removeFirst() }
        guard fields.count > 4 else { throw CertificateFactoryError("a certificate body of \(fields.count) fields") }
        return Array(fields[4].encodedBytes)
    }

    private static func children(of node: ASN1Node) throws -> [ASN1Node] {
        guard case .constructed(let nodes) = node.content else { throw CertificateFactoryError("a primitive node where a SEQUENCE belongs") }
        return Array(nodes)
    }

    private static func objectIdentifier(_ dotted: String) throws -> ASN1ObjectIdentifier {
        try ASN1ObjectIdentifier(dotRepresentation: dotted)
    }

    /// The four bytes of a dotted IPv4 literal; nil for anything else (a DNS name).
    private static func ipv4Bytes(_ text: String) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map { UInt8($0) }
        guard parts.count == 4, parts.allSatisfy({ $0 != nil }) else { return nil }
        return parts.compactMap { $0 }
    }
}

/// A certificate could not be made as asked.
public struct CertificateFactoryError: Error, CustomStringConvertible {
    /// What was wrong.
    public var message: String

    init(_ message: String) { self.message = message }

    public var description: String { "CertificateFactoryError: \(message)" }
}
