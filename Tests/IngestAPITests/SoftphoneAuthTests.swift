import Foundation
import IngestAPI
import OpenSSL
import ReceiptCore
import Testing

/// A Digest client written from RFC 7616 for the tests, independent of the server's code: it
/// starts from the password and formats everything itself.
struct DigestClient {
    var username: String
    var password: String
    var realm = SoftphoneCredentials.realm

    func header(
        method: String, uri: String, nonce: String, algorithm: String, nc: Int = 1, cnonce: String = "0a4f113b"
    ) -> String {
        func h(_ text: String) -> String {
            Digest.hex(algorithm.uppercased() == "SHA-256" ? Digest.sha256(Array(text.utf8)) : Digest.md5(Array(text.utf8)))
        }
        let count = String(format: "%08x", nc)
        let ha1 = h("\(username):\(realm):\(password)")
        let ha2 = h("\(method):\(uri)")
        let response = h("\(ha1):\(nonce):\(count):\(cnonce):auth:\(ha2)")
        return #"Digest username="\#(username)", realm="\#(realm)", nonce="\#(nonce)", uri="\#(uri)", "#
            + #"algorithm=\#(algorithm), qop=auth, nc=\#(count), cnonce="\#(cnonce)", response="\#(response)""#
    }
}

@Suite("Softphone authentication: Digest (RFC 7616), Basic, nonces")
struct SoftphoneAuthTests {
    let secret = Array("unit-test-nonce-secret-0123456789abcdef".utf8)
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    var nonces: DigestNonces { DigestNonces(secret: secret, lifetime: .seconds(300)) }

    @Test("The OpenSSL façade's MD5 and HMAC-SHA256 match RFC 1321 and RFC 4231")
    func primitives() {
        #expect(Digest.hex(Digest.md5([])) == "d41d8cd98f00b204e9800998ecf8427e")
        #expect(Digest.hex(Digest.md5(Array("abc".utf8))) == "900150983cd24fb0d6963f7d28e17f72")
        #expect(
            Digest.hex(Digest.hmacSHA256(key: [UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8)))
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        #expect(
            Digest.hex(Digest.hmacSHA256(key: Array("Jefe".utf8), Array("what do ya want for nothing?".utf8)))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(Digest.hmacSHA256(key: [], []).count == 32)
    }

    @Test(
        "Response digests match the worked examples of RFC 7616 §3.9.1",
        arguments: [
            (SoftphoneAuth.Algorithm.md5, "8ca523f5e9506fed4657c9700eebdbec"),
            (SoftphoneAuth.Algorithm.sha256, "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"),
        ])
    func rfcVectors(algorithm: SoftphoneAuth.Algorithm, expected: String) {
        let ha1 = algorithm.hash(Array("Mufasa:http-auth@example.org:Circle of Life".utf8))
        let response = SoftphoneAuth.expectedResponse(
            algorithm: algorithm, ha1: ha1, method: "GET", uri: "/dir/index.html",
            nonce: "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", nc: "00000001",
            cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", qop: "auth")
        #expect(response == expected)
        // The test client agrees with the RFC too.
        let header = DigestClient(username: "Mufasa", password: "Circle of Life", realm: "http-auth@example.org").header(
            method: "GET", uri: "/dir/index.html", nonce: "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
            algorithm: algorithm.rawValue, cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ")
        #expect(header.contains(#"response="\#(expected)""#))
    }

    @Test("Authorization headers: quoted strings with escapes and commas, tokens, Basic, other schemes")
    func parsing() {
        let header =
            #"Digest username="al\"ice", realm="receiptq",nonce="a,b", uri="/x?y=1&z=2",  response="ABC", algorithm=SHA-256, qop=auth, nc=00000001, cnonce="c""#
        guard case .digest(let digest) = SoftphoneAuth.parseAuthorization(header) else {
            Issue.record("not parsed")
            return
        }
        #expect(digest.username == #"al"ice"#)
        #expect(digest.nonce == "a,b")
        #expect(digest.uri == "/x?y=1&z=2")
        #expect(digest.algorithm == "SHA-256")
        #expect(digest.qop == "auth")
        #expect(digest.nc == "00000001")
        #expect(
            SoftphoneAuth.parseAuthorization("Basic " + Data("alice:pa:ss".utf8).base64EncodedString())
                == .basic(username: "alice", password: "pa:ss"))
        #expect(SoftphoneAuth.parseAuthorization("Bearer rq_x") == .other)
        for malformed in [
            "Basic !!!", "Basic " + Data("no-colon".utf8).base64EncodedString(), #"Digest username="a""#,
            #"Digest username="a", username="b", realm="r", nonce="n", uri="/", response="x""#,
            #"Digest username="a, realm="r""#, "Digest =x", "Digest " + String(repeating: "a", count: 5000),
        ] {
            #expect(SoftphoneAuth.parseAuthorization(malformed) == .malformed, "\(malformed.prefix(60))")
        }
    }

    func digest(_ header: String) throws -> SoftphoneAuth.DigestResponse {
        guard case .digest(let response) = SoftphoneAuth.parseAuthorization(header) else { throw CancellationError() }
        return response
    }

    @Test("Digest: the right password over a fresh nonce is valid, with either algorithm and any hex case")
    func digestValid() throws {
        let nonce = nonces.issue(now: now)
        for algorithm in ["MD5", "SHA-256", "sha-256"] {
            let client = DigestClient(username: Fixtures.username, password: Fixtures.password)
            let header = client.header(method: "POST", uri: "/cloudsoftphone/iap?a=1", nonce: nonce, algorithm: algorithm)
            var response = try digest(header)
            let verdict = SoftphoneAuth.verify(
                response, credentials: Fixtures.credentials, method: "POST", requestTarget: "/cloudsoftphone/iap?a=1", nonces: nonces,
                now: now.addingTimeInterval(10))
            #expect(verdict == .valid(nonceExpiresAt: now.addingTimeInterval(300)), "\(algorithm)")
            response.response = response.response.uppercased()
            #expect(
                SoftphoneAuth.verify(
                    response, credentials: Fixtures.credentials, method: "POST", requestTarget: "/cloudsoftphone/iap?a=1",
                    nonces: nonces, now: now) != .invalid)
        }
    }

    @Test("Digest: a wrong password, URI, method, realm, qop or algorithm is invalid")
    func digestInvalid() throws {
        let nonce = nonces.issue(now: now)
        let target = "/cloudsoftphone/iap"
        func verdict(_ header: String, method: String = "GET", target: String = target) throws -> SoftphoneAuth.DigestVerdict {
            SoftphoneAuth.verify(
                try digest(header), credentials: Fixtures.credentials, method: method, requestTarget: target, nonces: nonces, now: now)
        }
        let good = DigestClient(username: Fixtures.username, password: Fixtures.password)
        let valid = good.header(method: "GET", uri: target, nonce: nonce, algorithm: "MD5")
        #expect(try verdict(valid) != .invalid)
        let wrong = DigestClient(username: Fixtures.username, password: "wrong")
        #expect(try verdict(wrong.header(method: "GET", uri: target, nonce: nonce, algorithm: "MD5")) == .invalid)
        #expect(try verdict(valid, method: "POST") == .invalid)
        #expect(try verdict(valid, target: target + "?receipt=other") == .invalid)
        var otherRealm = good
        otherRealm.realm = "elsewhere"
        #expect(try verdict(otherRealm.header(method: "GET", uri: target, nonce: nonce, algorithm: "MD5")) == .invalid)
        #expect(try verdict(valid.replacingOccurrences(of: "qop=auth", with: "qop=auth-int")) == .invalid)
        #expect(try verdict(valid.replacingOccurrences(of: "algorithm=MD5", with: "algorithm=MD5-sess")) == .invalid)
        #expect(try verdict(valid.replacingOccurrences(of: "nc=00000001", with: "nc=1")) == .invalid)
        // A wrong password never earns `stale`, even over an expired nonce.
        let old = nonces.issue(now: now.addingTimeInterval(-3600))
        #expect(try verdict(wrong.header(method: "GET", uri: target, nonce: old, algorithm: "MD5")) == .invalid)
    }

    @Test("Digest: the right password over an expired or foreign nonce is stale")
    func digestStale() throws {
        let client = DigestClient(username: Fixtures.username, password: Fixtures.password)
        let expired = nonces.issue(now: now.addingTimeInterval(-301))
        let foreign = DigestNonces(secret: Array("another-process-secret-0123456789abcdef".utf8), lifetime: .seconds(300)).issue(now: now)
        for nonce in [expired, foreign, "not-a-nonce"] {
            let header = client.header(method: "GET", uri: "/cloudsoftphone/iap", nonce: nonce, algorithm: "SHA-256")
            #expect(
                SoftphoneAuth.verify(
                    try digest(header), credentials: Fixtures.credentials, method: "GET", requestTarget: "/cloudsoftphone/iap",
                    nonces: nonces, now: now) == .stale)
        }
    }

    @Test("Nonces: fresh for their lifetime, then expired; tampered or foreign ones are unknown")
    func nonceLifetime() {
        let nonce = nonces.issue(now: now)
        #expect(nonce.count == 43)
        #expect(!nonce.contains("\"") && !nonce.contains("+") && !nonce.contains("/"))
        #expect(nonces.check(nonce, now: now) == .fresh(expiresAt: now.addingTimeInterval(300)))
        #expect(nonces.check(nonce, now: now.addingTimeInterval(299)) == .fresh(expiresAt: now.addingTimeInterval(300)))
        #expect(nonces.check(nonce, now: now.addingTimeInterval(300)) == .expired)
        #expect(nonces.check(nonce, now: now.addingTimeInterval(-60)) == .expired)
        #expect(nonces.issue(now: now) != nonce)
        var tampered = Array(nonce)
        tampered[3] = tampered[3] == "A" ? "B" : "A"
        #expect(nonces.check(String(tampered), now: now) == .unknown)
        #expect(nonces.check("", now: now) == .unknown)
        #expect(nonces.check(String(repeating: "A", count: 43), now: now) == .unknown)
    }

    @Test("The replay guard admits each (nonce, nc) once, bounds uses per nonce, and stays bounded")
    func replayGuard() {
        let guardian = DigestReplayGuard(maxNonces: 4, maxUsesPerNonce: 2)
        let later = now.addingTimeInterval(300)
        #expect(guardian.admit(nonce: "n1", nc: "00000001", expiresAt: later, now: now) == .admitted)
        #expect(guardian.admit(nonce: "n1", nc: "00000001", expiresAt: later, now: now) == .replayed)
        #expect(guardian.admit(nonce: "n1", nc: "00000002", expiresAt: later, now: now) == .admitted)
        #expect(guardian.admit(nonce: "n1", nc: "00000003", expiresAt: later, now: now) == .exhausted)
        #expect(guardian.admit(nonce: "n1", nc: "zz", expiresAt: later, now: now) == .replayed)
        for index in 2...20 {
            #expect(guardian.admit(nonce: "n\(index)", nc: "00000001", expiresAt: later, now: now) == .admitted)
        }
        // The newest nonces are still remembered after the evictions.
        #expect(guardian.admit(nonce: "n20", nc: "00000001", expiresAt: later, now: now) == .replayed)
    }

    @Test("Basic: the SHA-256 HA1 of the password sent must match")
    func basic() {
        #expect(SoftphoneAuth.verifyBasic(username: Fixtures.username, password: Fixtures.password, credentials: Fixtures.credentials))
        #expect(!SoftphoneAuth.verifyBasic(username: Fixtures.username, password: "wrong", credentials: Fixtures.credentials))
        #expect(!SoftphoneAuth.verifyBasic(username: "bob", password: Fixtures.password, credentials: Fixtures.credentials))
    }

    @Test("Challenges: Digest SHA-256 then MD5 over one nonce, then Basic; stale only when asked")
    func challenges() {
        let challenges = SoftphoneAuth.challenges(nonce: "N", stale: false)
        #expect(
            challenges == [
                #"Digest realm="receiptq", qop="auth", algorithm=SHA-256, nonce="N""#,
                #"Digest realm="receiptq", qop="auth", algorithm=MD5, nonce="N""#,
                #"Basic realm="receiptq", charset="UTF-8""#,
            ])
        #expect(SoftphoneAuth.challenges(nonce: "N", stale: true).prefix(2).allSatisfy { $0.hasSuffix(", stale=true") })
    }

    @Test("Usernames that cannot be sent safely in Digest or Basic are refused")
    func usernames() {
        #expect(SoftphoneCredentials.problem(username: "alice.smith@example.com") == nil)
        for bad in ["", "a:b", #"a"b"#, #"a\b"#, "a b", "a\u{7}", String(repeating: "a", count: 129)] {
            #expect(SoftphoneCredentials.problem(username: bad) != nil, "\(bad)")
        }
    }
}
