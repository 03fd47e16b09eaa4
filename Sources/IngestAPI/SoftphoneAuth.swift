import Foundation
import OpenSSL
import ReceiptCore
import Synchronization

/// HTTP authentication of the Cloud Softphone web service, as pure functions: what the softphone's
/// `…AuthUsername`/`…AuthPassword` settings send (HTTP Digest, RFC 7616, or Basic, RFC 7617).
public enum SoftphoneAuth {
    /// A Digest hash algorithm. The `-sess` variants and `auth-int` are not offered: no client
    /// needs them, and `-sess` would need the server to keep per-session state.
    public enum Algorithm: String, Sendable, CaseIterable {
        case md5 = "MD5"
        case sha256 = "SHA-256"

        /// The algorithm named by a Digest `algorithm` parameter (case-insensitive); absent means MD5.
        public init?(parameter: String?) {
            switch parameter?.uppercased() {
            case nil, "MD5": self = .md5
            case "SHA-256": self = .sha256
            default: return nil
            }
        }

        /// The hash of `data`.
        public func hash(_ data: some Collection<UInt8>) -> [UInt8] {
            switch self {
            case .md5: Digest.md5(data)
            case .sha256: Digest.sha256(data)
            }
        }

        /// The stored HA1 of `credentials` for this algorithm.
        public func ha1(of credentials: SoftphoneCredentials) -> [UInt8] {
            switch self {
            case .md5: credentials.ha1MD5
            case .sha256: credentials.ha1SHA256
            }
        }
    }

    /// The `Authorization` header of a request, parsed.
    public enum Authorization: Sendable, Equatable {
        /// `Digest …` with every parameter it carried.
        case digest(DigestResponse)
        /// `Basic base64(user:password)`.
        case basic(username: String, password: String)
        /// A Digest or Basic header that cannot be read: refused, never taken for no header.
        case malformed
        /// Another scheme (say, `Bearer`): not this service's business.
        case other
    }

    /// The parameters of a `Digest` Authorization header (RFC 7616 §3.4).
    public struct DigestResponse: Sendable, Equatable {
        /// Whose credentials the client used.
        public var username: String
        /// The realm the client computed HA1 in.
        public var realm: String
        /// The server's nonce the client answers.
        public var nonce: String
        /// The request target the digest covers.
        public var uri: String
        /// The client's response digest, in hex.
        public var response: String
        /// The algorithm parameter as sent (nil: MD5).
        public var algorithm: String?
        /// The quality of protection chosen (only `auth` is accepted).
        public var qop: String?
        /// The nonce count, 8 hex digits.
        public var nc: String?
        /// The client's nonce.
        public var cnonce: String?

        /// Creates a response.
        public init(
            username: String, realm: String, nonce: String, uri: String, response: String, algorithm: String? = nil,
            qop: String? = nil, nc: String? = nil, cnonce: String? = nil
        ) {
            self.username = username
            self.realm = realm
            self.nonce = nonce
            self.uri = uri
            self.response = response
            self.algorithm = algorithm
            self.qop = qop
            self.nc = nc
            self.cnonce = cnonce
        }
    }

    /// The longest Authorization header read, beyond the request target it repeats (a Digest `uri`
    /// holds the whole query string, receipt included, when the softphone uses GET).
    public static let maxHeaderLength = 4096

    /// Parses an Authorization header value.
    /// - Parameter requestTargetLength: the length of the request's path and query, which a Digest
    ///   header repeats; a header longer than that plus ``maxHeaderLength`` is malformed.
    public static func parseAuthorization(_ header: String, requestTargetLength: Int = 0) -> Authorization {
        guard header.utf8.count <= maxHeaderLength + requestTargetLength else { return .malformed }
        let trimmed = header.drop { $0 == " " || $0 == "\t" }
        let scheme = trimmed.prefix { $0 != " " && $0 != "\t" }
        let rest = trimmed.dropFirst(scheme.count)
        switch scheme.lowercased() {
        case "basic":
            let token = rest.trimmingCharacters(in: .whitespaces)
            guard let data = Data(base64Encoded: token), let text = String(data: data, encoding: .utf8),
                let colon = text.firstIndex(of: ":")
            else { return .malformed }
            return .basic(username: String(text[..<colon]), password: String(text[text.index(after: colon)...]))
        case "digest":
            guard let parameters = authParameters(rest),
                let username = parameters["username"], let realm = parameters["realm"], let nonce = parameters["nonce"],
                let uri = parameters["uri"], let response = parameters["response"]
            else { return .malformed }
            return .digest(
                DigestResponse(
                    username: username, realm: realm, nonce: nonce, uri: uri, response: response, algorithm: parameters["algorithm"],
                    qop: parameters["qop"], nc: parameters["nc"], cnonce: parameters["cnonce"]))
        default:
            return .other
        }
    }

    /// Parses `name=token, name="quoted \"string\"", …` (RFC 9110 auth-param list); names are
    /// lower-cased. Nil when the list is malformed or a name repeats.
    static func authParameters(_ text: Substring) -> [String: String]? {
        var parameters: [String: String] = [:]
        var scalars = Substring.UnicodeScalarView(text.unicodeScalars)[...]
        func skipWhitespace() { while let first = scalars.first, first == " " || first == "\t" { scalars.removeFirst() } }
        while true {
            skipWhitespace()
            while scalars.first == "," {
                scalars.removeFirst()
                skipWhitespace()
            }
            guard !scalars.isEmpty else { break }
            let name = String(String.UnicodeScalarView(scalars.prefix { $0 != "=" && $0 != "," && $0 != " " && $0 != "\t" }))
            scalars.removeFirst(name.unicodeScalars.count)
            skipWhitespace()
            guard !name.isEmpty, scalars.first == "=" else { return nil }
            scalars.removeFirst()
            skipWhitespace()
            var value = String.UnicodeScalarView()
            if scalars.first == "\"" {
                scalars.removeFirst()
                var closed = false
                while let scalar = scalars.popFirst() {
                    if scalar == "\\" {
                        guard let escaped = scalars.popFirst() else { return nil }
                        value.append(escaped)
                    } else if scalar == "\"" {
                        closed = true
                        break
                    } else {
                        value.append(scalar)
                    }
                }
                guard closed else { return nil }
            } else {
                value.append(contentsOf: scalars.prefix { $0 != "," && $0 != " " && $0 != "\t" })
                scalars.removeFirst(value.count)
            }
            skipWhitespace()
            guard scalars.isEmpty || scalars.first == "," else { return nil }
            let key = name.lowercased()
            guard parameters[key] == nil else { return nil }
            parameters[key] = String(value)
        }
        return parameters
    }

    /// The response digest a client must send (RFC 7616 §3.4.1, qop=auth):
    /// `H(hex(HA1) ":" nonce ":" nc ":" cnonce ":" qop ":" hex(H(method ":" uri)))`, in lower-case hex.
    public static func expectedResponse(
        algorithm: Algorithm, ha1: [UInt8], method: String, uri: String, nonce: String, nc: String, cnonce: String,
        qop: String
    ) -> String {
        let ha2 = Digest.hex(algorithm.hash(Array("\(method):\(uri)".utf8)))
        return Digest.hex(algorithm.hash(Array("\(Digest.hex(ha1)):\(nonce):\(nc):\(cnonce):\(qop):\(ha2)".utf8)))
    }

    /// What a Digest response proves.
    public enum DigestVerdict: Sendable, Equatable {
        /// The right password, over a nonce this process issued and that is still fresh: admit the
        /// (nonce, nc) pair to the replay guard, which expires it at `nonceExpiresAt`.
        case valid(nonceExpiresAt: Date)
        /// The right password over a nonce that expired (or that another process, or this one
        /// before a restart, issued): answer `stale=true`, so the client retries with a fresh nonce
        /// without asking its user again.
        case stale
        /// Anything else.
        case invalid
    }

    /// Checks a Digest response against the stored credentials of its username.
    /// - Parameters:
    ///   - requestTarget: the request's path and query as received: the digest covers it, so a
    ///     captured header cannot be replayed with another receipt in the query string.
    public static func verify(
        _ response: DigestResponse, credentials: SoftphoneCredentials, method: String, requestTarget: String,
        nonces: DigestNonces, now: Date
    ) -> DigestVerdict {
        guard let algorithm = Algorithm(parameter: response.algorithm),
            response.username == credentials.username, response.realm == SoftphoneCredentials.realm,
            response.uri == requestTarget, response.qop?.lowercased() == "auth",
            let nc = response.nc, nc.utf8.count == 8, nc.allSatisfy(\.isHexDigit), UInt32(nc, radix: 16) != nil,
            let cnonce = response.cnonce, !cnonce.isEmpty
        else { return .invalid }
        let expected = expectedResponse(
            algorithm: algorithm, ha1: algorithm.ha1(of: credentials), method: method, uri: response.uri, nonce: response.nonce,
            nc: nc, cnonce: cnonce, qop: "auth")
        // Hex digits are case-insensitive; the comparison itself must not leak a matching prefix.
        guard Digest.constantTimeEqual(Array(expected.utf8), Array(response.response.lowercased().utf8)) else { return .invalid }
        switch nonces.check(response.nonce, now: now) {
        case .fresh(let expiresAt): return .valid(nonceExpiresAt: expiresAt)
        case .expired, .unknown: return .stale
        }
    }

    /// Checks Basic credentials: the SHA-256 HA1 of the password sent must equal the stored one.
    public static func verifyBasic(username: String, password: String, credentials: SoftphoneCredentials) -> Bool {
        guard username == credentials.username else { return false }
        let ha1 = Digest.sha256(SoftphoneCredentials.ha1Input(username: username, password: password))
        return Digest.constantTimeEqual(ha1, credentials.ha1SHA256)
    }

    /// The `WWW-Authenticate` values of a 401: Digest with SHA-256 (preferred, so first, RFC 7616
    /// §3.7) and MD5 over the same nonce, then Basic. The same nonce in both Digest challenges also
    /// lets a client that ignores `algorithm` answer with MD5 and still succeed.
    public static func challenges(nonce: String, stale: Bool) -> [String] {
        let realm = SoftphoneCredentials.realm
        let staleParameter = stale ? ", stale=true" : ""
        return Algorithm.allCases.reversed().map { algorithm in
            "Digest realm=\"\(realm)\", qop=\"auth\", algorithm=\(algorithm.rawValue), nonce=\"\(nonce)\"\(staleParameter)"
        } + ["Basic realm=\"\(realm)\", charset=\"UTF-8\""]
    }
}

/// Stateless Digest nonces: `base64url(issued-at ‖ 8 random bytes ‖ HMAC-SHA256(secret, both)[0..<16])`.
///
/// Nothing is stored per nonce: any process holding the same secret can check one, and a restart
/// (new per-process secret) only makes old nonces stale, never accepted.
public struct DigestNonces: Sendable {
    private let secret: [UInt8]
    /// How long a nonce is fresh after it was issued.
    public let lifetime: Duration

    /// Creates the nonce authority.
    /// - Parameters:
    ///   - secret: the HMAC key; share it between replicas behind one load balancer.
    ///   - lifetime: how long a nonce stays fresh.
    public init(secret: [UInt8], lifetime: Duration) {
        self.secret = secret
        self.lifetime = lifetime
    }

    /// A new nonce issued at `now`.
    public func issue(now: Date, random: [UInt8] = SecureRandom.bytes(8)) -> String {
        var body = withUnsafeBytes(of: UInt64(max(0, now.timeIntervalSince1970)).bigEndian) { Array($0) }
        body += random.prefix(8)
        body += [UInt8](repeating: 0, count: 16 - body.count)
        let mac = Digest.hmacSHA256(key: secret, body).prefix(16)
        return Data(body + mac).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// What a nonce is worth at `now`.
    public enum Check: Sendable, Equatable {
        /// Issued here, within its lifetime, which ends at the date.
        case fresh(expiresAt: Date)
        /// Issued here, but too long ago.
        case expired
        /// Not issued with this secret, or not a nonce at all.
        case unknown
    }

    /// Checks a nonce a client sent back.
    public func check(_ nonce: String, now: Date) -> Check {
        guard nonce.utf8.count == 43 else { return .unknown }
        let base64 = nonce.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "="
        guard let data = Data(base64Encoded: base64), data.count == 32 else { return .unknown }
        let bytes = [UInt8](data)
        let mac = Digest.hmacSHA256(key: secret, bytes[0..<16]).prefix(16)
        guard Digest.constantTimeEqual(Array(mac), Array(bytes[16..<32])) else { return .unknown }
        let issued = bytes[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let issuedAt = Date(timeIntervalSince1970: TimeInterval(issued))
        let expiresAt = issuedAt.addingTimeInterval(lifetime.seconds)
        // A nonce from the future means clocks disagree between replicas; a few seconds are tolerated.
        guard issuedAt.timeIntervalSince(now) <= 5, now < expiresAt else { return .expired }
        return .fresh(expiresAt: expiresAt)
    }
}

/// Remembers which (nonce, nc) pairs this process accepted while their nonce is fresh, so a
/// captured request cannot be replayed here.
///
/// It is per process, on purpose: a request replayed to another replica within the nonce's
/// lifetime (at most ``DigestNonces/lifetime``) is accepted there, but it can only submit again the
/// receipt it carried (the digest covers the URI, the receipt usually travels in it, and POST bodies
/// are idempotent too: the same receipt of the same app is one receipt, one id). Sharing the guard
/// through Redis would add a round trip to every purchase to stop a replay that gains nothing.
public final class DigestReplayGuard: Sendable {
    /// What became of one use of a nonce.
    public enum Admission: Sendable, Equatable {
        /// First use of this nc with this nonce.
        case admitted
        /// Seen before: a replay.
        case replayed
        /// The nonce was used too often: ask for a fresh one (`stale=true`).
        case exhausted
    }

    private struct Entry {
        var expiresAt: Date
        var counts: Set<UInt32>
    }

    private let entries = Mutex<[String: Entry]>([:])
    private let maxNonces: Int
    private let maxUsesPerNonce: Int

    /// Creates a guard.
    /// - Parameters:
    ///   - maxNonces: nonces remembered at once (only nonces of correctly authenticated requests are
    ///     added, so only clients that know a password can fill it).
    ///   - maxUsesPerNonce: requests per nonce before a fresh one is demanded.
    public init(maxNonces: Int = 100_000, maxUsesPerNonce: Int = 1000) {
        self.maxNonces = maxNonces
        self.maxUsesPerNonce = maxUsesPerNonce
    }

    /// Records one use of `nonce` with nonce count `nc` (hex, as sent).
    public func admit(nonce: String, nc: String, expiresAt: Date, now: Date) -> Admission {
        guard let count = UInt32(nc, radix: 16) else { return .replayed }
        return entries.withLock { entries in
            if var entry = entries[nonce] {
                if entry.counts.contains(count) { return .replayed }
                guard entry.counts.count < maxUsesPerNonce else { return .exhausted }
                entry.counts.insert(count)
                entries[nonce] = entry
                return .admitted
            }
            if entries.count >= maxNonces {
                entries = entries.filter { $0.value.expiresAt > now }
                if entries.count >= maxNonces {
                    // Still full of fresh nonces (heavy legitimate traffic): forget the oldest quarter.
                    // Their replays become possible here, which gains an attacker nothing (see above);
                    // refusing new nonces instead would lock every softphone out until some expire.
                    let oldest = entries.sorted { $0.value.expiresAt < $1.value.expiresAt }.prefix(max(1, maxNonces / 4))
                    for (key, _) in oldest { entries[key] = nil }
                }
            }
            entries[nonce] = Entry(expiresAt: expiresAt, counts: [count])
            return .admitted
        }
    }
}
