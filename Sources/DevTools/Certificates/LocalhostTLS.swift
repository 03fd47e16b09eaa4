import Foundation
import OpenSSL

/// A throwaway certificate authority and a server certificate it issued for local names, written
/// as PEM files for the TLS servers of the tests (Python's `ssl`, `redis-server --tls-port`) and
/// for the clients that must trust them (`CURLOPT_CAINFO`, stunnel's `CAfile`).
///
/// Made by ``CertificateFactory`` (P-256 keys, valid from an hour ago for two days), so no test
/// needs the `openssl` command.
///
/// ```swift
/// let tls = try LocalhostTLS(in: directory)
/// let server = try LoopbackServer(certificate: tls.certificate, key: tls.key)
/// options.caInfo = tls.ca
/// ```
public struct LocalhostTLS: Sendable {
    /// Where the files are: `ca.pem`, `server.pem` and `server.key`.
    public let directory: URL

    /// The CA's certificate (PEM): what a client trusts.
    public var ca: String { directory.appendingPathComponent("ca.pem").path }
    /// The server's certificate (PEM).
    public var certificate: String { directory.appendingPathComponent("server.pem").path }
    /// The server's private key (PKCS#8 PEM).
    public var key: String { directory.appendingPathComponent("server.key").path }

    /// Makes the CA and the server certificate and writes them into `directory` (created if needed).
    ///
    /// - Parameters:
    ///   - names: the server certificate's `subjectAltName`s (DNS names, or IPv4 literals); its
    ///     common name is the first. A client verifying the host checks the name it dialled
    ///     against these, so a test can make one it must refuse.
    ///   - authority: the CA's common name; two calls make two unrelated CAs either way.
    /// - Throws: when a key or certificate cannot be made, or a file cannot be written.
    public init(in directory: URL, names: [String] = ["localhost"], authority: String = "receiptq test CA") throws {
        self.directory = directory
        let from = Date(timeIntervalSinceNow: -3600)
        let to = Date(timeIntervalSinceNow: 2 * 86_400)
        let authorityKey = try PrivateKey.generateP256()
        let root = try CertificateFactory.selfSigned(
            CertificateRequestSpec(commonName: authority, isCA: true, validFrom: from, validTo: to), key: authorityKey)
        let serverKey = try PrivateKey.generateP256()
        let server = try CertificateFactory.issue(
            CertificateRequestSpec(commonName: names.first ?? "localhost", validFrom: from, validTo: to, alternativeNames: names),
            publicKeyOf: serverKey, issuer: root, issuerKey: authorityKey)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try root.pem.write(toFile: ca, atomically: true, encoding: .utf8)
        try server.pem.write(toFile: certificate, atomically: true, encoding: .utf8)
        try serverKey.pemPKCS8().write(toFile: key, atomically: true, encoding: .utf8)
        // A test key, but still nobody else's to read (as the forger keeps its keys).
        chmod(key, 0o600)
    }
}
