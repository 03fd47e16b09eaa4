import Foundation
import OpenSSL
import ReceiptCore

/// The certificates a verifier trusts, loaded from a directory of PEM files.
///
/// Self-signed certificates are roots (Apple Root CA, Apple Root CA - G3); the others are
/// intermediates offered to chain building (Apple's WWDR and iTunes Store CAs). Xcode's StoreKit
/// testing certificates are kept apart: receipts they sign verify only when the operator put one
/// in the directory under a name containing `storekit` (case-insensitive).
public struct TrustStore: Sendable {
    public var roots: [Certificate]
    public var intermediates: [Certificate]
    public var storeKitTestCertificates: [Certificate]

    /// Creates a store from certificates.
    public init(roots: [Certificate], intermediates: [Certificate] = [], storeKitTestCertificates: [Certificate] = []) {
        self.roots = roots
        self.intermediates = intermediates
        self.storeKitTestCertificates = storeKitTestCertificates
    }

    /// The intermediates allowed to issue iOS 6 transaction-receipt signers: the iTunes Store CA.
    public var transactionIntermediates: [Certificate] {
        intermediates.filter { $0.subjectCommonName?.contains("iTunes Store") == true }
    }

    /// Loads every `*.pem`, `*.crt` and `*.cer` (PEM) file of `directory`.
    /// - Throws: when the directory cannot be read or a file is not a PEM certificate.
    public static func load(directory: URL) throws -> TrustStore {
        var store = TrustStore(roots: [])
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        for file in files where [".pem", ".crt", ".cer"].contains(where: file.lowercased().hasSuffix) {
            for certificate in try Certificate.loadAll(pemFile: directory.appendingPathComponent(file).path) {
                if file.lowercased().contains("storekit") {
                    store.storeKitTestCertificates.append(certificate)
                } else if certificate.isSelfSigned {
                    store.roots.append(certificate)
                } else {
                    store.intermediates.append(certificate)
                }
            }
        }
        return store
    }
}

/// The outcome of a signature check, as `receiptq receipt inspect` and `fraud_reason` report it.
public struct SignatureResult: Sendable, Equatable {
    /// Whether Apple (or a trusted StoreKit test certificate) signed exactly these bytes.
    public var valid: Bool
    /// A bounded reason when invalid: `signature_mismatch`, `untrusted_chain`, `certificate_expired`,
    /// `certificate_not_yet_valid`, `not_pkcs7`, `not_signed_data`, `no_content`, `no_signature`,
    /// `malformed`, `no_trust_roots`.
    public var reason: String?
    /// The signing certificate's common name.
    public var signer: String?
    /// `sha1` or `sha256`.
    public var digest: String?

    /// Creates a result.
    public init(valid: Bool, reason: String?, signer: String?, digest: String?) {
        self.valid = valid
        self.reason = reason
        self.signer = signer
        self.digest = digest
    }
}

/// When a signature is judged.
public enum VerificationTime: Sendable, Equatable {
    /// At the receipt's creation date (unified) or purchase date (iOS 6): the default, because
    /// every receipt-signing certificate Apple used before now has expired.
    case receiptDate
    /// Now: for callers who want only currently valid certificates.
    case now
    /// At a given instant.
    case at(Date)
}

/// Checks that Apple signed a receipt, with OpenSSL: PKCS#7 for unified receipts, RSA-SHA1 over
/// version byte ‖ purchase-info for iOS 6 transaction receipts, and the certificate chain to the
/// trusted roots in both cases.
///
/// Unified receipts go through ``PKCS7Verifier``s, which keep the embedded certificates and the
/// chain verdicts in process-wide caches: make one verifier at start-up and share it (it is
/// `Sendable`). ``verifyReference(bytes:receipt:time:)`` runs the uncached reference path, which
/// gives the same results.
public struct ReceiptSignatureVerifier: Sendable {
    public let trustStore: TrustStore
    private let apple: PKCS7Verifier
    private let storeKit: PKCS7Verifier?
    private let transactionChain: CachedChainVerifier

    /// Creates a verifier trusting `trustStore`.
    public init(trustStore: TrustStore) {
        self.trustStore = trustStore
        apple = PKCS7Verifier(trustedRoots: trustStore.roots, intermediates: trustStore.intermediates)
        storeKit =
            trustStore.storeKitTestCertificates.isEmpty
            ? nil : PKCS7Verifier(trustedRoots: trustStore.storeKitTestCertificates, checkPurpose: false)
        transactionChain = CachedChainVerifier(intermediates: trustStore.transactionIntermediates, trustedRoots: trustStore.roots)
    }

    /// Verifies the signature of `receipt`, decoded from `bytes`.
    /// - Parameters:
    ///   - bytes: the receipt as received (after base64).
    ///   - receipt: its decoded form (for the dates and, for iOS 6, the signature blob).
    ///   - time: when to judge the certificates.
    public func verify(bytes: [UInt8], receipt: AppReceipt, time: VerificationTime = .receiptDate) -> SignatureResult {
        verify(bytes: bytes, receipt: receipt, time: time, cached: true)
    }

    /// ``verify(bytes:receipt:time:)`` without the caches: every certificate decoded and every chain
    /// built by OpenSSL on each call, as before the caches existed. The same result, several times
    /// slower; for tests that hold the cached path to it, and for diagnosis.
    public func verifyReference(bytes: [UInt8], receipt: AppReceipt, time: VerificationTime = .receiptDate) -> SignatureResult {
        verify(bytes: bytes, receipt: receipt, time: time, cached: false)
    }

    /// How many unified verifications the cached path decided, and how many it handed to the reference path.
    public var statistics: PKCS7Verifier.Statistics {
        let counts = [apple.statistics] + (storeKit.map { [$0.statistics] } ?? [])
        return PKCS7Verifier.Statistics(
            fastPath: counts.reduce(0) { $0 + $1.fastPath }, referencePath: counts.reduce(0) { $0 + $1.referencePath })
    }

    private func verify(bytes: [UInt8], receipt: AppReceipt, time: VerificationTime, cached: Bool) -> SignatureResult {
        guard !trustStore.roots.isEmpty || !trustStore.storeKitTestCertificates.isEmpty else {
            return SignatureResult(valid: false, reason: "no_trust_roots", signer: nil, digest: nil)
        }
        switch receipt.style {
        case .unified: return verifyUnified(bytes, at: date(time, receipt.creationDate), cached: cached)
        case .transaction: return verifyTransaction(receipt, at: date(time, receipt.inApp.first?.purchaseDate), cached: cached)
        }
    }

    private func date(_ time: VerificationTime, _ receiptDate: Date?) -> Date? {
        switch time {
        case .receiptDate: receiptDate ?? Date()
        case .now: nil
        case .at(let date): date
        }
    }

    private func verifyUnified(_ bytes: [UInt8], at date: Date?, cached: Bool) -> SignatureResult {
        var result =
            cached
            ? apple.verify(der: bytes, at: date)
            : PKCS7.verify(der: bytes, trustedRoots: trustStore.roots, intermediates: trustStore.intermediates, at: date)
        if !result.valid, result.reason == "untrusted_chain", let storeKit {
            // Xcode's StoreKit certificate signs with a code-signing key usage, so the purpose check
            // is dropped, but only for the certificates the operator chose to trust.
            let trusted =
                cached
                ? storeKit.verify(der: bytes, at: date)
                : PKCS7.verify(der: bytes, trustedRoots: trustStore.storeKitTestCertificates, at: date, checkPurpose: false)
            if trusted.valid { result = trusted }
        }
        return SignatureResult(
            valid: result.valid, reason: result.valid ? nil : result.reason, signer: result.signerCommonName,
            digest: result.digest)
    }

    private func verifyTransaction(_ receipt: AppReceipt, at date: Date?, cached: Bool) -> SignatureResult {
        guard let blob = receipt.transactionSignature, let purchaseInfo = receipt.transactionPurchaseInfo,
            let parts = TransactionReceiptCodec.parseSignatureBlob(blob)
        else {
            return SignatureResult(valid: false, reason: "no_signature", signer: nil, digest: nil)
        }
        // Cached: the signer certificate is decoded once, and the chain judged from a cached verdict.
        let leaf = cached ? transactionChain.leaf(der: parts.certificate) : nil
        guard let certificate = cached ? leaf?.certificate : try? Certificate(der: parts.certificate) else {
            return SignatureResult(valid: false, reason: "malformed", signer: nil, digest: "sha1")
        }
        let signer = certificate.subjectCommonName
        let signed = TransactionReceiptCodec.signedBytes(version: parts.version, purchaseInfo: purchaseInfo)
        guard RSASignature.verifySHA1(signature: parts.signature, data: signed, certificate: certificate) else {
            return SignatureResult(valid: false, reason: "signature_mismatch", signer: signer, digest: "sha1")
        }
        // Only the iTunes Store CA may stand between an iOS 6 signer and the root: ChainVerifier
        // checks no purpose, and every developer certificate also chains to Apple's root through
        // WWDR, so offering the WWDR intermediates here would let any developer sign receipts.
        let chain =
            if let leaf {
                transactionChain.verify(leaf, at: date)
            } else {
                ChainVerifier.verify(certificate, intermediates: trustStore.transactionIntermediates, trustedRoots: trustStore.roots, at: date)
            }
        return SignatureResult(valid: chain.valid, reason: chain.reason, signer: signer, digest: "sha1")
    }
}

extension ReceiptSignatureVerifier: ReceiptAuthenticity {
    /// The signature check at the receipt's own date (see ``VerificationTime/receiptDate``).
    public func fraudReason(bytes: [UInt8], receipt: AppReceipt) -> String? {
        let result = verify(bytes: bytes, receipt: receipt)
        return result.valid ? nil : (result.reason ?? "signature_invalid")
    }
}
