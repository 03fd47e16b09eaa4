internal import COpenSSL
import Foundation

/// What an OCSP responder says of one certificate.
public enum OCSPCertificateStatus: Sendable, Equatable {
    case good
    /// Revoked at `at` (RFC 5280 `reason` code when the responder gives one).
    case revoked(at: Date?, reason: Int?)
    /// The responder does not know the certificate.
    case unknown
}

/// A responder's signed answer about one certificate: its status and how long it may be cached.
public struct OCSPAnswer: Sendable, Equatable {
    public var status: OCSPCertificateStatus
    public var thisUpdate: Date
    /// Until when the answer holds; nil: the responder gives no bound (the caller picks one).
    public var nextUpdate: Date?

    public init(status: OCSPCertificateStatus, thisUpdate: Date, nextUpdate: Date?) {
        self.status = status
        self.thisUpdate = thisUpdate
        self.nextUpdate = nextUpdate
    }
}

/// Why an OCSP response could not be used (a closed set: the metric's and the log's words).
public enum OCSPFailure: String, Error, Sendable, CaseIterable {
    /// Not a DER `OCSPResponse`.
    case malformed
    /// The responder answered with an error status (`tryLater`, `unauthorized`, …), no basic response.
    case unsuccessful
    /// The basic response is not signed by the issuer or a responder the issuer delegated to.
    case badSignature = "bad_signature"
    /// The response holds no status for the certificate asked about.
    case noStatus = "no_status"
    /// `thisUpdate` in the future, or `nextUpdate` in the past.
    case stale
}

/// RFC 6960 OCSP through OpenSSL: the request for a certificate, its responder's URL (the
/// certificate's Authority Information Access), and the answer checked (signature by the issuer or
/// its delegated responder, freshness at an injected instant). The HTTP POST is the caller's.
public enum OCSP {
    /// The OCSP URLs of `certificate`'s Authority Information Access extension (none: it names no
    /// responder, so its revocation cannot be checked online).
    public static func responderURLs(of certificate: Certificate) -> [String] {
        guard let stack = X509_get1_ocsp(certificate.x509) else { return [] }
        defer { X509_email_free(stack) }
        return (0..<copenssl_sk_OPENSSL_STRING_num(stack)).compactMap { index in
            copenssl_sk_OPENSSL_STRING_value(stack, index).map { String(cString: $0) }
        }
    }

    /// The DER `OCSPRequest` for `certificate` issued by `issuer` (SHA-1 CertID, as responders expect; no nonce, so a
    /// response can be cached and shared).
    /// - Throws: ``OpenSSLError`` when OpenSSL cannot build it.
    public static func request(for certificate: Certificate, issuer: Certificate) throws -> [UInt8] {
        guard let request = OCSP_REQUEST_new() else { throw OpenSSLError.drain(.other, "OCSP_REQUEST_new") }
        defer { OCSP_REQUEST_free(request) }
        guard let id = OCSP_cert_to_id(nil, certificate.x509, issuer.x509) else { throw OpenSSLError.drain(.certificate, "OCSP_cert_to_id") }
        // The request owns the id from here.
        guard OCSP_request_add0_id(request, id) != nil else {
            OCSP_CERTID_free(id)
            throw OpenSSLError.drain(.other, "OCSP_request_add0_id")
        }
        return try derEncode("i2d_OCSP_REQUEST", .other) { i2d_OCSP_REQUEST(request, $0) }
    }

    /// Reads `response` about `certificate`: signed by `issuer` itself, or by a responder
    /// certificate `issuer` issued for OCSP signing that chains to `roots`; current at `now` (5
    /// minutes of clock skew allowed).
    /// - Throws: ``OCSPFailure``.
    public static func answer(
        _ response: [UInt8], for certificate: Certificate, issuer: Certificate, roots: [Certificate], now: Date
    ) throws(OCSPFailure) -> OCSPAnswer {
        let parsed: OpaquePointer? = response.withUnsafeBufferPointer { buffer in
            guard let start = buffer.baseAddress, buffer.count > 0 else { return nil }
            var cursor: UnsafePointer<UInt8>? = start
            return d2i_OCSP_RESPONSE(nil, &cursor, buffer.count)
        }
        guard let parsed else {
            _ = OpenSSLError.drainQueue()
            throw .malformed
        }
        defer { OCSP_RESPONSE_free(parsed) }
        guard OCSP_response_status(parsed) == OCSP_RESPONSE_STATUS_SUCCESSFUL, let basic = OCSP_response_get1_basic(parsed) else {
            _ = OpenSSLError.drainQueue()
            throw .unsuccessful
        }
        defer { OCSP_BASICRESP_free(basic) }
        guard let store = X509_STORE_new() else { throw .badSignature }
        defer { X509_STORE_free(store) }
        for root in roots { X509_STORE_add_cert(store, root.x509) }
        // The issuer is trusted as a signer (OCSP_TRUSTOTHER): a response it signed itself needs no
        // chain; a delegated responder's certificate is chained to `roots` through it, and OpenSSL
        // checks it was issued by `issuer` for OCSP signing.
        let verified =
            (try? withCertificateStack([issuer]) { stack in
                OCSP_basic_verify(basic, stack, store, UInt(OCSP_TRUSTOTHER))
            }) ?? 0
        guard verified == 1 else {
            _ = OpenSSLError.drainQueue()
            throw .badSignature
        }
        guard let id = OCSP_cert_to_id(nil, certificate.x509, issuer.x509) else { throw .noStatus }
        defer { OCSP_CERTID_free(id) }
        var status: Int32 = -1
        var reason: Int32 = -1
        var revokedAt: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var thisUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var nextUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        guard OCSP_resp_find_status(basic, id, &status, &reason, &revokedAt, &thisUpdate, &nextUpdate) == 1, let thisUpdate else {
            throw .noStatus
        }
        let answer = OCSPAnswer(
            status: status == V_OCSP_CERTSTATUS_GOOD
                ? .good
                : status == V_OCSP_CERTSTATUS_REVOKED
                    ? .revoked(at: revokedAt.map { Certificate.date(UnsafePointer($0)) }, reason: reason >= 0 ? Int(reason) : nil) : .unknown,
            thisUpdate: Certificate.date(UnsafePointer(thisUpdate)), nextUpdate: nextUpdate.map { Certificate.date(UnsafePointer($0)) })
        let skew: TimeInterval = 300
        guard answer.thisUpdate <= now.addingTimeInterval(skew), answer.nextUpdate.map { $0 >= now.addingTimeInterval(-skew) } ?? true
        else { throw .stale }
        return answer
    }
}
