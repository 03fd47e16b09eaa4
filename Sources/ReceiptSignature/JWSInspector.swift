import Foundation
import ReceiptCore

/// What `receiptq receipt inspect` prints for a compact JWS (a StoreKit 2 signed transaction, a
/// renewal info, or a notification's `signedPayload`).
public enum JWSInspector {
    /// Decodes `compact` and checks its signature; a notification's nested signed transaction and
    /// renewal info are inspected in place of their strings.
    /// - Parameters:
    ///   - verifier: the signature check; nil reports `no_trust_roots`.
    /// - Returns: `{"kind", "payload", "signature": {"valid", "reason", "chain"}, "signed": {"date",
    ///   "of"}}` (when Apple signed it, and whose `signedDate` that is: `payload`, or a 2022-format
    ///   notification's `signedTransactionInfo`), and whether it and every nested JWS verified.
    /// - Throws: ``JWSFailure`` `malformed_jws` / `malformed_payload` when there is nothing to show.
    public static func inspect(_ compact: String, verifier: (any SignedPayloadVerifier)?) throws(JWSFailure) -> (json: JSONValue, valid: Bool) {
        let jws = try CompactJWS(compact)
        guard var payload = try? JSONValue.parse(jws.payload), payload.objectValue != nil else {
            throw .malformedPayload
        }
        // When Apple signed it, which the chain is judged at (unless judged now), and whose date
        // that is: a notification of the 2022 format has none of its own. Read before the nested
        // JWS are replaced by their inspections below.
        let signing = JWSSigningDate(of: payload)
        let result = verifier?.verify(compact) ?? .failure(.noTrustRoots)
        var valid: Bool
        let signature: JSONValue
        switch result {
        case .success(let verified):
            valid = true
            signature = .object(["valid": .bool(true), "reason": .null, "chain": .array(verified.chainSubjects.map { .string($0) })])
        case .failure(let failure):
            valid = false
            signature = .object(["valid": .bool(false), "reason": .string(failure.reason), "chain": .array([])])
        }
        let kind = JWSPayloadKind(payload)
        if kind == .notification, case .object(var object) = payload, var data = object["data"]?.objectValue {
            for key in ["signedTransactionInfo", "signedRenewalInfo"] {
                guard let nested = data[key]?.stringValue, let inner = try? inspect(nested, verifier: verifier) else { continue }
                data[key] = inner.json
                valid = valid && inner.valid
            }
            object["data"] = .object(data)
            payload = .object(object)
        }
        let signed: JSONValue = .object([
            "date": ReceiptInspector.date(signing?.date), "of": signing.map { .string($0.source.rawValue) } ?? .null,
        ])
        return (.object(["kind": .string(kind.rawValue), "payload": payload, "signature": signature, "signed": signed]), valid)
    }
}
