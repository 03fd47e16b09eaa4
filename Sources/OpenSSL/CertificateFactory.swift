internal import COpenSSL
import Foundation

public import struct Foundation.Date

/// What to put in a certificate made by ``CertificateFactory``.
public struct CertificateRequestSpec: Sendable {
    /// Subject common name (CN).
    public var commonName: String
    /// Subject organisation (O), omitted when nil.
    public var organization: String?
    /// Whether this is a CA: `basicConstraints CA:TRUE` and `keyUsage keyCertSign, cRLSign`;
    /// otherwise `CA:FALSE` and `keyUsage digitalSignature`.
    public var isCA: Bool
    /// Start of validity.
    public var validFrom: Date
    /// End of validity.
    public var validTo: Date
    /// Serial number (positive).
    public var serial: UInt64
    /// Dotted OIDs added as non-critical extensions whose value is an ASN.1 NULL: how Apple marks
    /// its App Store signing leaf (`1.2.840.113635.100.6.11.1`) and WWDR intermediate
    /// (`1.2.840.113635.100.6.2.1`), so a mock's certificates can be shaped like Apple's.
    public var markerOIDs: [String]

    /// Creates a spec; by default a leaf valid from an hour ago for one year, with a random serial.
    public init(
        commonName: String,
        organization: String? = nil,
        isCA: Bool = false,
        validFrom: Date = Date(timeIntervalSinceNow: -3600),
        validTo: Date = Date(timeIntervalSinceNow: 365 * 86400),
        serial: UInt64 = UInt64.random(in: 1...UInt64(Int64.max)),
        markerOIDs: [String] = []
    ) {
        self.markerOIDs = markerOIDs
        self.commonName = commonName
        self.organization = organization
        self.isCA = isCA
        self.validFrom = validFrom
        self.validTo = validTo
        self.serial = serial
    }
}

/// Builds X.509 v3 certificates signed with SHA-256, for tests and for forging mock receipts.
///
/// Each certificate gets `basicConstraints` (critical), `keyUsage` (critical), a subject key
/// identifier and an authority key identifier, which is what chain building expects.
public enum CertificateFactory {
    /// A self-signed certificate (a root CA when `spec.isCA`).
    ///
    /// - Throws: ``OpenSSLError`` with code `.certificate`.
    public static func selfSigned(_ spec: CertificateRequestSpec, key: PrivateKey) throws -> Certificate {
        try build(spec, subjectKey: key, issuer: nil, issuerKey: key)
    }

    /// A certificate for `subjectKey`'s public key, issued and signed by `issuer`/`issuerKey`.
    ///
    /// - Throws: ``OpenSSLError`` with code `.certificate`.
    public static func issue(
        _ spec: CertificateRequestSpec,
        publicKeyOf subjectKey: PrivateKey,
        issuer: Certificate,
        issuerKey: PrivateKey
    ) throws -> Certificate {
        try build(spec, subjectKey: subjectKey, issuer: issuer, issuerKey: issuerKey)
    }

    private static func build(
        _ spec: CertificateRequestSpec,
        subjectKey: PrivateKey,
        issuer: Certificate?,
        issuerKey: PrivateKey
    ) throws -> Certificate {
        guard let x509 = X509_new() else { throw OpenSSLError.drain(.other, "X509_new") }
        // Owned from here on: any throw below frees it in deinit.
        let certificate = Certificate(owning: x509)
        func check(_ ok: Bool, _ operation: String) throws {
            guard ok else { throw OpenSSLError.drain(.certificate, operation) }
        }
        try check(X509_set_version(x509, 2) == 1, "X509_set_version")  // 2 means v3
        try check(ASN1_INTEGER_set_uint64(X509_get_serialNumber(x509), spec.serial) == 1, "serial")
        try check(ASN1_TIME_set(X509_getm_notBefore(x509), time_t(spec.validFrom.timeIntervalSince1970)) != nil, "notBefore")
        try check(ASN1_TIME_set(X509_getm_notAfter(x509), time_t(spec.validTo.timeIntervalSince1970)) != nil, "notAfter")
        try check(X509_set_pubkey(x509, subjectKey.pkey) == 1, "X509_set_pubkey")

        guard let name = X509_get_subject_name(x509) else { throw OpenSSLError.drain(.certificate, "subject") }
        if let organization = spec.organization {
            try check(X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, organization, -1, -1, 0) == 1, "subject O")
        }
        try check(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, spec.commonName, -1, -1, 0) == 1, "subject CN")
        let issuerName = issuer.map { X509_get_subject_name($0.x509) } ?? name
        try check(X509_set_issuer_name(x509, issuerName) == 1, "X509_set_issuer_name")

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer?.x509 ?? x509, x509, nil, nil, 0)
        // Subject key id first: for a self-signed certificate the authority key id copies it.
        let extensions: [(Int32, String)] = [
            (NID_basic_constraints, spec.isCA ? "critical,CA:TRUE" : "critical,CA:FALSE"),
            (NID_key_usage, spec.isCA ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"),
            (NID_subject_key_identifier, "hash"),
            (NID_authority_key_identifier, "keyid:always"),
        ]
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
                throw OpenSSLError.drain(.certificate, "X509V3_EXT_conf_nid(\(value))")
            }
            defer { X509_EXTENSION_free(ext) }
            try check(X509_add_ext(x509, ext, -1) == 1, "X509_add_ext")
        }

        for oid in spec.markerOIDs { try addMarker(oid, to: x509) }

        try check(X509_sign(x509, issuerKey.pkey, EVP_sha256()) > 0, "X509_sign")
        return withExtendedLifetime(issuer) { certificate }
    }

    private static func addMarker(_ oid: String, to x509: OpaquePointer) throws {
        guard let object = OBJ_txt2obj(oid, 1) else { throw OpenSSLError.drain(.certificate, "OBJ_txt2obj(\(oid))") }
        defer { ASN1_OBJECT_free(object) }
        guard let value = ASN1_OCTET_STRING_new() else { throw OpenSSLError.drain(.certificate, "ASN1_OCTET_STRING_new") }
        defer { ASN1_OCTET_STRING_free(value) }
        let null: [UInt8] = [0x05, 0x00]
        guard ASN1_OCTET_STRING_set(value, null, Int32(null.count)) == 1,
            let ext = X509_EXTENSION_create_by_OBJ(nil, object, 0, value)
        else { throw OpenSSLError.drain(.certificate, "X509_EXTENSION_create_by_OBJ(\(oid))") }
        defer { X509_EXTENSION_free(ext) }
        guard X509_add_ext(x509, ext, -1) == 1 else { throw OpenSSLError.drain(.certificate, "X509_add_ext(\(oid))") }
    }
}
