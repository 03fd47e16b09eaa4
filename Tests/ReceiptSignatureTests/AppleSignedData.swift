import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Testing

/// Apple's own signed notifications of the shared corpus, and the root that vouches for them.
enum AppleSignedData {
    /// The `signedPayload` (a compact JWS) of `notifications/<file>`.
    static func signedPayload(_ file: String) throws -> String {
        let root = try #require(TestEnvironment.appStoreTestData)
        let json = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: root.appendingPathComponent("notifications/\(file)")))
        return try #require(json["signedPayload"]?.stringValue)
    }

    /// Apple Root CA - G3 alone.
    static func rootG3() throws -> TrustStore {
        let root = try #require(TestEnvironment.appStoreTestData)
        return TrustStore(roots: try Certificate.loadAll(pemFile: root.appendingPathComponent("certs/AppleRootCA-G3.pem").path))
    }
}
