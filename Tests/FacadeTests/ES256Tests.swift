import DevTools
import Foundation
import OpenSSL
import ReceiptTesting
import SystemTesting
import Testing

@Suite("OpenSSL façade: ES256 in JOSE's r ‖ s form", .blockingWork)
struct ES256Tests {
    @Test("a signature verifies with the matching key only, and not after one bit of data or signature changes")
    func roundTrip() throws {
        let key = try PrivateKey.generateP256()
        let other = try PrivateKey.generateP256()
        let data = Array("header.payload".utf8)
        let signature = try ES256.sign(data, key: key)
        #expect(signature.count == 64)
        #expect(ES256.verify(signature: signature, of: data, key: try key.publicKey))
        #expect(!ES256.verify(signature: signature, of: data, key: try other.publicKey))
        var tamperedData = data
        tamperedData[0] ^= 1
        #expect(!ES256.verify(signature: signature, of: tamperedData, key: try key.publicKey))
        for index in [0, 31, 32, 63] {
            var tampered = signature
            tampered[index] ^= 0x01
            #expect(!ES256.verify(signature: tampered, of: data, key: try key.publicKey))
        }
        #expect(!ES256.verify(signature: Array(signature.prefix(63)), of: data, key: try key.publicKey))
        #expect(!ES256.verify(signature: [UInt8](repeating: 0, count: 64), of: data, key: try key.publicKey))
    }

    @Test("an RSA key neither signs nor verifies ES256")
    func otherKeyTypes() throws {
        let rsa = try PrivateKey.generateRSA(bits: 2048)
        #expect(!rsa.isP256)
        #expect(throws: OpenSSLError.self) { try ES256.sign([1, 2, 3], key: rsa) }
        #expect(!ES256.verify(signature: [UInt8](repeating: 1, count: 64), of: [1, 2, 3], key: try rsa.publicKey))
    }

    @Test("a P-256 key survives PKCS#8 PEM, as an In-App Purchase key (.p8) arrives")
    func pkcs8() throws {
        let key = try PrivateKey.generateP256()
        let reread = try PrivateKey(pem: try key.pemPKCS8())
        #expect(reread.isP256)
        let signature = try ES256.sign([7, 7, 7], key: reread)
        #expect(ES256.verify(signature: signature, of: [7, 7, 7], key: try PublicKey(spki: try key.publicKey.spki)))
    }

    @Test("Apple's own signature on a real App Store Server Notification verifies with its x5c leaf, and carries the marker OIDs")
    func appleVector() throws {
        let root = try #require(TestEnvironment.appStoreTestData)
        let file = root.appendingPathComponent("notifications/gopay-v2-consumption_request-production.json")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
        let jws = try #require(json["signedPayload"] as? String)
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(parts.count == 3)
        let header = try #require(try JSONSerialization.jsonObject(with: base64URL(parts[0])) as? [String: Any])
        let chain = try #require(header["x5c"] as? [String]).map { try Certificate(der: Array(Data(base64Encoded: $0)!)) }
        #expect(chain[0].hasExtension(oid: "1.2.840.113635.100.6.11.1"))
        #expect(!chain[0].hasExtension(oid: "1.2.840.113635.100.6.2.1"))
        #expect(chain[1].hasExtension(oid: "1.2.840.113635.100.6.2.1"))
        let signed = Array("\(parts[0]).\(parts[1])".utf8)
        let signature = Array(base64URL(parts[2]))
        #expect(ES256.verify(signature: signature, of: signed, key: try chain[0].publicKey))
        #expect(!ES256.verify(signature: signature, of: signed, key: try chain[1].publicKey))
    }

    private func base64URL(_ text: String) -> Data {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64) ?? Data()
    }
}

@Suite("OpenSSL façade: P-256 certificates with Apple's marker extensions", .blockingWork)
struct MarkerCertificateTests {
    @Test("a P-256 root issues an intermediate and a leaf carrying the requested marker OIDs, and only those")
    func markers() throws {
        let rootKey = try PrivateKey.generateP256()
        let root = try CertificateFactory.selfSigned(CertificateRequestSpec(commonName: "Mock Root", isCA: true), key: rootKey)
        let leafKey = try PrivateKey.generateP256()
        let leaf = try CertificateFactory.issue(
            CertificateRequestSpec(commonName: "Mock Leaf", markerOIDs: ["1.2.840.113635.100.6.11.1"]), publicKeyOf: leafKey,
            issuer: root, issuerKey: rootKey)
        #expect(leaf.hasExtension(oid: "1.2.840.113635.100.6.11.1"))
        #expect(!leaf.hasExtension(oid: "1.2.840.113635.100.6.2.1"))
        #expect(!root.hasExtension(oid: "1.2.840.113635.100.6.11.1"))
        #expect(try leaf.publicKey.isP256)
        #expect(try leaf.publicKey.spki == leafKey.publicKey.spki)
        #expect(!leaf.hasExtension(oid: "not an oid"))
    }
}
