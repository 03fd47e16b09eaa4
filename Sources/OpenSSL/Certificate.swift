internal import COpenSSL
import Foundation
import Synchronization

public import struct Foundation.Date

/// An X.509 certificate held by OpenSSL.
///
/// `@unchecked Sendable` is honest here: the `X509` is never mutated after `init`, and OpenSSL 3
/// computes its lazily cached extension data under its own lock, so concurrent reads are safe.
public final class Certificate: @unchecked Sendable {
    let x509: OpaquePointer

    /// What a verification asks of a certificate every time (its name, key and Apple's markers),
    /// read once: a cached chain then costs its signature check and little else.
    struct Memo {
        var commonName: String??
        var publicKey: PublicKey?
        var extensions: [String: Bool] = [:]
        var sha256Fingerprint: String?
    }

    let memo = Mutex(Memo())

    /// Takes ownership of `x509` (one reference).
    init(owning x509: OpaquePointer) {
        self.x509 = x509
    }

    /// Takes a new reference to a certificate borrowed from some other OpenSSL object.
    convenience init?(retaining x509: OpaquePointer?) {
        guard let x509, X509_up_ref(x509) == 1 else { return nil }
        self.init(owning: x509)
    }

    deinit {
        X509_free(x509)
    }

    /// Reads the first certificate of a PEM string.
    ///
    /// - Throws: ``OpenSSLError`` with code `.decode`.
    public convenience init(pem: String) throws {
        let x509 = try withReadBIO(Array(pem.utf8)) { PEM_read_bio_X509($0, nil, nil, nil) }
        guard let x509 else { throw OpenSSLError.drain(.decode, "PEM_read_bio_X509") }
        self.init(owning: x509)
    }

    /// Reads a DER certificate; trailing bytes are rejected.
    ///
    /// - Throws: ``OpenSSLError`` with code `.decode`.
    public convenience init(der: [UInt8]) throws {
        let x509: OpaquePointer? = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            guard let start = buffer.baseAddress, buffer.count > 0 else { return nil }
            var cursor: UnsafePointer<UInt8>? = start
            let x509 = d2i_X509(nil, &cursor, buffer.count)
            if let x509, cursor.map({ $0 - start }) != buffer.count {
                X509_free(x509)
                return nil
            }
            return x509
        }
        guard let x509 else { throw OpenSSLError.drain(.decode, "d2i_X509") }
        self.init(owning: x509)
    }

    /// Reads every certificate in a PEM file (a CA bundle, or a chain).
    ///
    /// - Throws: ``OpenSSLError`` with code `.decode` when the file cannot be read or holds none.
    public static func loadAll(pemFile path: String) throws -> [Certificate] {
        guard let bio = BIO_new_file(path, "r") else { throw OpenSSLError.drain(.decode, "BIO_new_file") }
        defer { BIO_free(bio) }
        var certificates: [Certificate] = []
        while let x509 = PEM_read_bio_X509(bio, nil, nil, nil) {
            certificates.append(Certificate(owning: x509))
        }
        // The loop always ends with a "no start line" entry at end of file; it is not an error.
        let reasons = OpenSSLError.drainQueue()
        guard !certificates.isEmpty else {
            throw OpenSSLError(.decode, message: "no certificate in PEM file: \(reasons.joined(separator: "; "))")
        }
        return certificates
    }

    /// The DER encoding.
    public var der: [UInt8] {
        // Re-encoding a certificate that decoded or was signed cannot fail short of memory exhaustion.
        (try? derEncode("i2d_X509", .certificate) { i2d_X509(x509, $0) }) ?? []
    }

    /// The PEM encoding (`-----BEGIN CERTIFICATE-----`, with a trailing newline).
    public var pem: String {
        let bytes = (try? collectingBIO("PEM_write_bio_X509", .certificate) { PEM_write_bio_X509($0, x509) == 1 }) ?? []
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The subject's first common name (CN), if any.
    public var subjectCommonName: String? {
        if let known = memo.withLock({ $0.commonName }) { return known }
        let name = readSubjectCommonName()
        memo.withLock { $0.commonName = .some(name) }
        return name
    }

    private func readSubjectCommonName() -> String? {
        guard let name = X509_get_subject_name(x509) else { return nil }
        let index = X509_NAME_get_index_by_NID(name, NID_commonName, -1)
        guard index >= 0, let entry = X509_NAME_get_entry(name, index),
            let data = X509_NAME_ENTRY_get_data(entry)
        else { return nil }
        var utf8: UnsafeMutablePointer<UInt8>? = nil
        let length = ASN1_STRING_to_UTF8(&utf8, data)
        guard length >= 0, let utf8 else {
            OpenSSLError.drainQueue()
            return nil
        }
        defer { copenssl_free(utf8) }
        return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
    }

    /// Whether the certificate is issued by its own subject and verifies with its own key (a root).
    public var isSelfSigned: Bool {
        defer { _ = OpenSSLError.drainQueue() }
        return X509_check_issued(x509, x509) == X509_V_OK
    }

    /// Start of the validity period.
    public var notBefore: Date { Self.date(X509_get0_notBefore(x509)) }

    /// End of the validity period.
    public var notAfter: Date { Self.date(X509_get0_notAfter(x509)) }

    /// SHA-256 of the DER, upper-case hex pairs joined by colons: `"B0:B1:73:…"`. Read once: the
    /// revocation check keys its cache by it at every signature verified (re-encoding and hashing
    /// the chain each time was 5 % of a worker's CPU).
    public var sha256Fingerprint: String {
        if let known = memo.withLock({ $0.sha256Fingerprint }) { return known }
        let fingerprint = Digest.hex(Digest.sha256(der)).uppercased().utf8
            .chunked2()
            .joined(separator: ":")
        memo.withLock { $0.sha256Fingerprint = fingerprint }
        return fingerprint
    }

    static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date {
        var parts = tm()
        guard let time, ASN1_TIME_to_tm(time, &parts) == 1 else {
            OpenSSLError.drainQueue()
            return Date(timeIntervalSince1970: 0)
        }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }
}

extension String.UTF8View {
    fileprivate func chunked2() -> [String] {
        var result: [String] = []
        var iterator = makeIterator()
        while let first = iterator.next() {
            let second = iterator.next()
            result.append(String(decoding: [first] + (second.map { [$0] } ?? []), as: UTF8.self))
        }
        return result
    }
}
