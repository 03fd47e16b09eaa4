import Curl
import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature
import ReceiptTesting
import Synchronization
import SystemTesting
import Testing

/// The OCSP check of Apple-shaped chains (issue 42 item 7) against a real responder: `openssl ocsp`
/// on a loopback port, answering from an `index.txt` for the mock chain's intermediate, whose leaf
/// names it in its Authority Information Access.
@Suite("OCSP revocation of JWS chains, against openssl ocsp", .blockingWork)
struct OCSPRevocationTests {
    /// Every outcome the checker counted (what the metric sees).
    final class Outcomes: Sendable {
        let recorded = Mutex<[OCSPCheckOutcome]>([])
        var all: [OCSPCheckOutcome] { recorded.withLock { $0 } }
        func record(_ outcome: OCSPCheckOutcome) { recorded.withLock { $0.append(outcome) } }
    }

    /// A chain whose leaf names `http://127.0.0.1:<port>` as its OCSP responder, and (unless
    /// `running` is false) that responder, saying the leaf (serial 3) is good or revoked.
    struct Setup {
        var authority: MockAppleJWSAuthority
        var responder: ChildProcess?
        var directory: URL

        func stop() {
            responder?.terminate()
            responder?.waitUntilExit()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    static func setUp(revoked: Bool, running: Bool = true) throws -> Setup {
        let port = try freeLoopbackPort()
        let authority = try MockAppleJWSAuthority.generate(ocspURL: "http://127.0.0.1:\(port)")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ocsp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        guard running else { return Setup(authority: authority, responder: nil, directory: directory) }
        try authority.intermediate.pem.write(to: directory.appendingPathComponent("ca.pem"), atomically: true, encoding: .utf8)
        try authority.intermediateKey.pemPKCS8().write(to: directory.appendingPathComponent("ca.key"), atomically: true, encoding: .utf8)
        // openssl's CA database: status, expiry, revocation date, serial (hex), file, subject.
        let line =
            revoked
            ? "R\t351231235959Z\t240101000000Z\t03\tunknown\t/CN=leaf\n" : "V\t351231235959Z\t\t03\tunknown\t/CN=leaf\n"
        try line.write(to: directory.appendingPathComponent("index.txt"), atomically: true, encoding: .utf8)
        let responder = try ChildProcess(
            [
                "openssl", "ocsp", "-index", "index.txt", "-port", String(port), "-CA", "ca.pem", "-rsigner", "ca.pem", "-rkey",
                "ca.key", "-nmin", "1",
            ], directory: directory.path)
        let setup = Setup(authority: authority, responder: responder, directory: directory)
        // Up once it answers a query about the leaf.
        let ready = eventuallyBlocking {
            guard let request = try? OCSP.request(for: authority.leaf, issuer: authority.intermediate) else { return false }
            return Self.transport("http://127.0.0.1:\(port)", request) != nil
        }
        guard ready else {
            setup.stop()
            throw SpawnError("openssl ocsp did not answer on port \(port)")
        }
        return setup
    }

    static let transport: OCSPRevocationChecker.Transport = { url, request in
        var options = CurlOptions()
        options.requestTimeout = .seconds(5)
        guard let easy = try? CurlEasy(options: options),
            let response = try? easy.perform(
                HTTPRequest(method: "POST", url: url, headers: [(name: "Content-Type", value: "application/ocsp-request")], body: request)),
            response.status == 200
        else { return nil }
        return response.body
    }

    static func signed(_ authority: MockAppleJWSAuthority) throws -> String {
        try authority.sign(
            .object([
                "transactionId": .string("2000000000000001"), "originalTransactionId": .string("2000000000000001"),
                "bundleId": .string("com.example"), "productId": .string("pro"),
                "purchaseDate": .number((Date().timeIntervalSince1970 * 1000).rounded()),
                "signedDate": .number((Date().timeIntervalSince1970 * 1000).rounded()),
            ]))
    }

    static func verifier(
        _ setup: Setup, policy: RevocationPolicy, outcomes: Outcomes, clock: @escaping @Sendable () -> Date = { Date() }
    ) -> JWSVerifier {
        let checker = OCSPRevocationChecker(
            policy: policy, roots: [setup.authority.root], transport: transport, now: clock, record: { outcomes.record($0) })
        return JWSVerifier(trustStore: TrustStore(roots: [setup.authority.root]), revocation: checker)
    }

    @Test("A revoked leaf is refused as certificate_revoked; the OCSP request names it and the responder's answer is checked")
    func revokedLeaf() throws {
        let setup = try Self.setUp(revoked: true)
        defer { setup.stop() }
        #expect(OCSP.responderURLs(of: setup.authority.leaf).first?.hasPrefix("http://127.0.0.1:") == true)
        #expect(OCSP.responderURLs(of: setup.authority.intermediate).isEmpty)
        let outcomes = Outcomes()
        let verifier = Self.verifier(setup, policy: .soft, outcomes: outcomes)
        #expect(verifier.verify(try Self.signed(setup.authority)).failure == .certificateRevoked)
        #expect(JWSFailure.certificateRevoked.reason == "certificate_revoked")
        #expect(outcomes.all == [.revoked])
        // Without the check, the same JWS verifies: the refusal is the revocation's.
        #expect(JWSVerifier(trustStore: TrustStore(roots: [setup.authority.root])).verify(try Self.signed(setup.authority)).failure == nil)
        // An answer about another issuer's certificate is not taken as this one's.
        let stranger = try MockAppleJWSAuthority.generate()
        let request = try OCSP.request(for: setup.authority.leaf, issuer: setup.authority.intermediate)
        let response = try #require(Self.transport(OCSP.responderURLs(of: setup.authority.leaf)[0], request))
        #expect(throws: OCSPFailure.badSignature) {
            try OCSP.answer(response, for: setup.authority.leaf, issuer: stranger.intermediate, roots: [stranger.root], now: Date())
        }
        #expect(throws: OCSPFailure.malformed) {
            try OCSP.answer([0x30, 0x03, 0x0A, 0x01], for: setup.authority.leaf, issuer: setup.authority.intermediate, roots: [], now: Date())
        }
    }

    @Test("A good leaf is asked about once and cached until the answer's nextUpdate (injected clock), then asked again")
    func goodLeafCached() throws {
        let setup = try Self.setUp(revoked: false)
        defer { setup.stop() }
        let outcomes = Outcomes()
        let clock = MockClock(start: Date())
        let verifier = Self.verifier(setup, policy: .hard, outcomes: outcomes, clock: clock.closure)
        let jws = try Self.signed(setup.authority)
        #expect(verifier.verify(jws).failure == nil)
        #expect(verifier.verify(jws).failure == nil)
        // The leaf once (good), the intermediate once (it names no responder).
        #expect(outcomes.all == [.good, .noResponder])
        // `-nmin 1`: the answer holds a minute.
        clock.advance(by: 120)
        #expect(verifier.verify(jws).failure == nil)
        #expect(outcomes.all == [.good, .noResponder, .good])
    }

    @Test("A responder that does not answer: soft-fail passes and counts unreachable once per retry interval; hard-fail refuses")
    func unreachable() throws {
        let setup = try Self.setUp(revoked: true, running: false)
        defer { setup.stop() }
        let jws = try Self.signed(setup.authority)
        let soft = Outcomes()
        let clock = MockClock(start: Date())
        let lenient = Self.verifier(setup, policy: .soft, outcomes: soft, clock: clock.closure)
        #expect(lenient.verify(jws).failure == nil)
        #expect(lenient.verify(jws).failure == nil)
        #expect(soft.all == [.unreachable, .noResponder])
        clock.advance(by: 61)
        #expect(lenient.verify(jws).failure == nil)
        #expect(soft.all == [.unreachable, .noResponder, .unreachable])
        let hard = Outcomes()
        #expect(Self.verifier(setup, policy: .hard, outcomes: hard).verify(jws).failure == .revocationUnavailable)
        #expect(hard.all == [.unreachable])
        let off = Outcomes()
        #expect(Self.verifier(setup, policy: .off, outcomes: off).verify(jws).failure == nil)
        #expect(off.all.isEmpty)
    }
}

extension Result {
    /// The failure, or nil on success.
    fileprivate var failure: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}
