import Foundation
import ReceiptCore

/// The body of `POST /client/transactions`: a StoreKit 2 signed transaction from the device, or a
/// transaction id (with the environment, when known), and the submission fields of the receipts
/// endpoint.
public struct SubmitTransactionRequest: Sendable, Equatable {
    /// What identifies the purchase.
    public enum Proof: Sendable, Equatable {
        /// `signed_transaction`: a compact JWS, checked at the door.
        case signedTransaction(String)
        /// `transaction_id` (+ `environment`): only the Server API can say what it is.
        case transactionID(String, environment: AppStoreEnvironment?)
    }

    public var proof: Proof
    public var submission: Submission
    /// True when `ip_address` was absent (so the peer address applies).
    public var ipAddressOmitted: Bool

    /// Validates a parsed JSON body.
    /// - Returns: the request, or every field error found.
    public static func parse(_ body: JSONValue) -> Result<SubmitTransactionRequest, FieldErrors> {
        guard let object = body.objectValue else {
            return .failure(FieldErrors([FieldError(field: "body", reason: "must be a JSON object")]))
        }
        var errors: [FieldError] = []
        var proof: Proof?
        // Absent means absent; a null is a wrong type (the document types both as strings).
        switch (object["signed_transaction"], object["transaction_id"]) {
        case (nil, nil):
            errors.append(FieldError(field: "signed_transaction", reason: "or transaction_id is required"))
        case (_?, _?):
            errors.append(FieldError(field: "transaction_id", reason: "must not be sent with signed_transaction"))
        case (.string(let jws)?, _):
            if jws.utf8.count > CompactJWS.maxLength {
                errors.append(FieldError(field: "signed_transaction", reason: "must be at most \(CompactJWS.maxLength) bytes"))
            } else if !CompactJWS.looksLikeJWS(jws) {
                errors.append(FieldError(field: "signed_transaction", reason: "is not a compact JWS (three base64url segments)"))
            } else {
                proof = .signedTransaction(jws)
            }
        case (_?, _):
            errors.append(FieldError(field: "signed_transaction", reason: "must be a string"))
        case (_, .string(let id)?):
            if (1...64).contains(id.utf8.count), id.utf8.allSatisfy({ (48...57).contains($0) }) {
                proof = .transactionID(id, environment: nil)
            } else {
                errors.append(FieldError(field: "transaction_id", reason: "must be Apple's decimal transaction id (1 to 64 digits)"))
            }
        case (_, _?):
            errors.append(FieldError(field: "transaction_id", reason: "must be a string"))
        }
        var environment: AppStoreEnvironment?
        switch object["environment"] {
        case nil, .null?: break
        case .string(let text)?:
            if let value = AppStoreEnvironment(rawValue: text.lowercased()) {
                environment = value
            } else {
                errors.append(FieldError(field: "environment", reason: "must be production or sandbox"))
            }
        default:
            errors.append(FieldError(field: "environment", reason: "must be a string"))
        }
        if environment != nil, case .signedTransaction? = proof {
            errors.append(FieldError(field: "environment", reason: "is taken from the signed transaction; send it only with transaction_id"))
        }
        let (submission, ipOmitted) = SubmitReceiptRequest.parseSubmission(object, &errors)
        guard errors.isEmpty, var proof else { return .failure(FieldErrors(errors)) }
        if case .transactionID(let id, _) = proof { proof = .transactionID(id, environment: environment) }
        return .success(SubmitTransactionRequest(proof: proof, submission: submission, ipAddressOmitted: ipOmitted))
    }
}
