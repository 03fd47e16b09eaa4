import Foundation
import OpenSSL
import ReceiptCore
import Synchronization

/// How a deployment treats Apple's chains' revocation (`RECEIPTQ_OCSP`).
public enum RevocationPolicy: String, Sendable, CaseIterable {
    /// Not checked.
    case off
    /// Checked; a revoked certificate refuses the JWS, an unreachable responder lets it pass (counted).
    case soft
    /// Checked; a chain whose status cannot be learnt is refused too (`revocation_unavailable`).
    case hard
}

/// What one OCSP query came to: the `outcome` label of `receiptq_ocsp_checks_total`.
public enum OCSPCheckOutcome: String, Sendable, CaseIterable {
    case good
    case revoked
    /// The responder does not know the certificate.
    case unknown
    /// No answer: connection refused, timeout, or an HTTP error.
    case unreachable
    /// An answer that is not a usable signed OCSP response (see ``OCSPFailure``).
    case invalidResponse = "invalid_response"
    /// The certificate names no OCSP responder: nothing to ask.
    case noResponder = "no_responder"
}

/// OCSP checks of the leaf and intermediate of the `x5c` chains Apple signs JWS with, as Apple's
/// own libraries do, without adding latency to every request: each certificate's answer is cached
/// until the response's `nextUpdate` (by the injected clock), so a process asks once per
/// certificate and period (Apple signs every JWS with the same few certificates); a failed query
/// is remembered for `retryAfterFailure`, so a down responder costs one timeout per certificate and
/// interval, not one per request.
///
/// Where it runs: wherever a chain is verified (``JWSVerifier``): the door (signed transactions,
/// app transactions, notifications) and the worker (the Server API's answers). The door is where
/// a forgery is refused (402 `certificate_revoked`); the query itself is synchronous on the
/// verifying thread, on a cache miss only.
///
/// Thread-safe.
public final class OCSPRevocationChecker: Sendable {
    /// POSTs a DER `OCSPRequest` to a responder URL; the DER response, or nil when there is none
    /// (transport failure or a non-200 answer).
    public typealias Transport = @Sendable (_ url: String, _ request: [UInt8]) -> [UInt8]?

    private enum Known: Sendable {
        case good, revoked, unavailable, unchecked
    }

    private let policy: RevocationPolicy
    private let roots: [Certificate]
    private let transport: Transport
    private let now: @Sendable () -> Date
    private let retryAfterFailure: TimeInterval
    private let longestCache: TimeInterval
    private let record: @Sendable (OCSPCheckOutcome) -> Void
    private let cache = Mutex<[String: (known: Known, until: Date)]>([:])

    /// Creates a checker.
    /// - Parameters:
    ///   - policy: what an unlearnable status means (``RevocationPolicy/off`` checks nothing).
    ///   - roots: the trusted roots a delegated responder's certificate must chain to.
    ///   - transport: the HTTP POST to the responder.
    ///   - retryAfterFailure: how long a failed query's verdict is kept before asking again.
    ///   - longestCache: the longest an answer is kept (also for answers without `nextUpdate`).
    ///   - now: the injected clock.
    ///   - record: counts each query's outcome (the metric).
    public init(
        policy: RevocationPolicy, roots: [Certificate], transport: @escaping Transport, retryAfterFailure: Duration = .seconds(60),
        longestCache: Duration = .seconds(86_400), now: @escaping @Sendable () -> Date = { Date() },
        record: @escaping @Sendable (OCSPCheckOutcome) -> Void = { _ in }
    ) {
        self.policy = policy
        self.roots = roots
        self.transport = transport
        self.retryAfterFailure = Self.seconds(retryAfterFailure)
        self.longestCache = Self.seconds(longestCache)
        self.now = now
        self.record = record
    }

    /// The failure `chain` (leaf first, as verified) comes to, or nil when it may be trusted: its
    /// leaf and intermediate each checked against their issuer.
    public func failure(for chain: [Certificate]) -> JWSFailure? {
        guard policy != .off else { return nil }
        for index in 0..<min(2, max(0, chain.count - 1)) {
            switch status(of: chain[index], issuer: chain[index + 1]) {
            case .good, .unchecked: continue
            case .revoked: return .certificateRevoked
            case .unavailable: if policy == .hard { return .revocationUnavailable }
            }
        }
        return nil
    }

    private func status(of certificate: Certificate, issuer: Certificate) -> Known {
        let key = certificate.sha256Fingerprint + issuer.sha256Fingerprint
        let at = now()
        if let hit = cache.withLock({ $0[key] }), hit.until > at { return hit.known }
        let (known, until) = query(certificate, issuer: issuer, at: at)
        cache.withLock { $0[key] = (known, until) }
        return known
    }

    private func query(_ certificate: Certificate, issuer: Certificate, at: Date) -> (Known, Date) {
        let retry = at.addingTimeInterval(retryAfterFailure)
        guard let url = OCSP.responderURLs(of: certificate).first else {
            record(.noResponder)
            return (.unchecked, at.addingTimeInterval(longestCache))
        }
        guard let request = try? OCSP.request(for: certificate, issuer: issuer), let response = transport(url, request) else {
            record(.unreachable)
            return (.unavailable, retry)
        }
        let answer: OCSPAnswer
        do {
            answer = try OCSP.answer(response, for: certificate, issuer: issuer, roots: roots, now: at)
        } catch {
            record(.invalidResponse)
            return (.unavailable, retry)
        }
        let until = min(answer.nextUpdate ?? at.addingTimeInterval(longestCache), at.addingTimeInterval(longestCache))
        switch answer.status {
        case .good:
            record(.good)
            return (.good, until)
        case .revoked:
            record(.revoked)
            // A revocation is final: kept as long as anything is.
            return (.revoked, at.addingTimeInterval(longestCache))
        case .unknown:
            record(.unknown)
            return (.unavailable, retry)
        }
    }

    private static func seconds(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
