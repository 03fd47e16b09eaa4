import AppStoreClient
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Server API JWTs: Apple's shape, ES256, cached and renewed")
struct ServerAPITokenTests {
    @Test("Header and claims are exactly Apple's, the signature verifies with the key, exp is 20 minutes after iat")
    func shape() throws {
        let clock = MockClock()
        let key = try PrivateKey.generateP256()
        let issuer = ServerAPITokenIssuer(now: clock.closure)
        let credentials = ServerAPIKey(issuerID: "57246542-96fe-1a63-e053-0824d011072a", keyID: "2X9R4HXF34", privateKeyPEM: try key.pemPKCS8())
        let token = try issuer.token(for: credentials, bundleID: "com.example.a")
        let parts = token.split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        let header = try JSONDecoder().decode(JSONValue.self, from: Data(try #require(Base64URL.decode(parts[0]))))
        let claims = try JSONDecoder().decode(JSONValue.self, from: Data(try #require(Base64URL.decode(parts[1]))))
        #expect(header == .object(["alg": .string("ES256"), "kid": .string("2X9R4HXF34"), "typ": .string("JWT")]))
        let iat = Int64(clock.now.timeIntervalSince1970)
        #expect(claims["iss"]?.stringValue == "57246542-96fe-1a63-e053-0824d011072a")
        #expect(claims["aud"]?.stringValue == "appstoreconnect-v1")
        #expect(claims["bid"]?.stringValue == "com.example.a")
        #expect(claims["iat"]?.stringValue == String(iat))
        #expect(claims["exp"]?.stringValue == String(iat + 1200))
        #expect(claims.objectValue?.count == 5)
        #expect(ES256.verify(signature: try #require(Base64URL.decode(parts[2])), of: Array("\(parts[0]).\(parts[1])".utf8), key: try key.publicKey))
    }

    @Test("A token is reused until 5 minutes before expiry, then renewed; another bundle or a rotated key gets its own")
    func caching() throws {
        let clock = MockClock()
        let issuer = ServerAPITokenIssuer(now: clock.closure)
        let credentials = ServerAPIKey(issuerID: "i", keyID: "k", privateKeyPEM: try PrivateKey.generateP256().pemPKCS8())
        let first = try issuer.token(for: credentials, bundleID: "com.a")
        clock.advance(by: 14 * 60)
        #expect(try issuer.token(for: credentials, bundleID: "com.a") == first)
        #expect(try issuer.token(for: credentials, bundleID: "com.b") != first)
        clock.advance(by: 2 * 60)
        let renewed = try issuer.token(for: credentials, bundleID: "com.a")
        #expect(renewed != first)
        var rotated = credentials
        rotated.privateKeyPEM = try PrivateKey.generateP256().pemPKCS8()
        #expect(try issuer.token(for: rotated, bundleID: "com.a") != renewed)
    }

    @Test("A key that is not P-256 fails with a message that holds no key material")
    func badKey() throws {
        let pem = try PrivateKey.generateRSA(bits: 2048).pemPKCS8()
        let issuer = ServerAPITokenIssuer()
        #expect(throws: ServerAPITokenIssuer.Failure.self) {
            try issuer.token(for: ServerAPIKey(issuerID: "i", keyID: "k", privateKeyPEM: pem), bundleID: "b")
        }
        do {
            _ = try issuer.token(for: ServerAPIKey(issuerID: "i", keyID: "k", privateKeyPEM: pem), bundleID: "b")
        } catch {
            #expect(!"\(error)".contains("PRIVATE") && !"\(error)".contains(pem.dropFirst(40).prefix(20)))
        }
    }
}
