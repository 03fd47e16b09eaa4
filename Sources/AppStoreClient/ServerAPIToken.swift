import Foundation
import OpenSSL
import ReceiptCore
import Synchronization

/// Makes the bearer tokens of the App Store Server API: ES256 JWTs signed with the app's In-App
/// Purchase key, exactly as Apple documents them — header `{"alg":"ES256","kid":…,"typ":"JWT"}`,
/// claims `iss` (issuer id), `iat`, `exp` (Apple refuses more than 60 minutes; these live 20),
/// `aud: "appstoreconnect-v1"` and `bid` (the bundle id).
///
/// A token is reused until 5 minutes before it expires, per key and bundle id, so signing costs
/// nothing per call. Keys are parsed once. Thread-safe. Neither keys nor tokens are ever logged.
public final class ServerAPITokenIssuer: Sendable {
    /// How long a token is valid (Apple allows at most 60 minutes).
    public static let lifetime: TimeInterval = 20 * 60
    /// A token is replaced when less than this remains.
    public static let renewBefore: TimeInterval = 5 * 60

    private struct Cached {
        var token: String
        var expiresAt: Date
    }

    private struct State {
        var tokens: [String: Cached] = [:]
        var keys: [String: PrivateKey] = [:]
    }

    private let state = Mutex(State())
    private let now: @Sendable () -> Date

    /// Creates an issuer with an injected clock.
    public init(now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
    }

    /// Why a token could not be made (the key is not a P-256 PKCS#8 key). Never carries the key.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String { "the In-App Purchase key is not a P-256 private key" }
    }

    /// A valid token for `key` and `bundleID`, cached or new.
    /// - Throws: ``Failure`` when the key cannot sign.
    public func token(for key: ServerAPIKey, bundleID: String) throws -> String {
        let at = now()
        // The cache key includes the PEM's digest: a rotated key under the same id signs anew.
        let cacheKey = "\(key.issuerID)\u{0}\(key.keyID)\u{0}\(bundleID)\u{0}\(Digest.hex(Digest.sha256(Array(key.privateKeyPEM.utf8))))"
        if let cached = state.withLock({ $0.tokens[cacheKey] }), cached.expiresAt.timeIntervalSince(at) > Self.renewBefore {
            return cached.token
        }
        let signingKey = try privateKey(key, cacheKey: cacheKey)
        let issuedAt = Int64(at.timeIntervalSince1970)
        let expiresAt = issuedAt + Int64(Self.lifetime)
        let header = JSONValue.object(["alg": .string("ES256"), "kid": .string(key.keyID), "typ": .string("JWT")])
        let claims = JSONValue.object([
            "iss": .string(key.issuerID), "iat": .number(Double(issuedAt)), "exp": .number(Double(expiresAt)),
            "aud": .string("appstoreconnect-v1"), "bid": .string(bundleID),
        ])
        let input = "\(Self.segment(header)).\(Self.segment(claims))"
        guard let signature = try? ES256.sign(Array(input.utf8), key: signingKey) else { throw Failure() }
        let token = "\(input).\(Base64URL.encode(signature))"
        state.withLock { $0.tokens[cacheKey] = Cached(token: token, expiresAt: Date(timeIntervalSince1970: TimeInterval(expiresAt))) }
        return token
    }

    private func privateKey(_ key: ServerAPIKey, cacheKey: String) throws -> PrivateKey {
        if let parsed = state.withLock({ $0.keys[cacheKey] }) { return parsed }
        guard let parsed = try? PrivateKey(pem: key.privateKeyPEM), parsed.isP256 else { throw Failure() }
        state.withLock { $0.keys[cacheKey] = parsed }
        return parsed
    }

    private static func segment(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Base64URL.encode((try? encoder.encode(value)).map(Array.init) ?? [])
    }
}
