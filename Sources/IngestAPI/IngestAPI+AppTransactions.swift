import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ReceiptCore

/// The app transaction API (issue 42 item 6): the device's signed `AppTransaction`, verified like a
/// signed transaction and stored per user, for paid-to-free migrations (the version and date the
/// customer first bought or downloaded the app).
///
/// - `POST /client/app-transactions` `{"signed_app_transaction": JWS, "user_identifier": …}`: 200
///   with what is stored; 402 with `fraud_reason` when it is not Apple's or not this app's (nothing
///   stored); 422 naming the field.
/// - `GET /client/app-transactions?user_identifier=…`: the user's stored app transactions.
///
/// Stored at the door, not through the queue: nothing in it needs Apple (its signature is Apple's
/// statement), and the answer is what the app waits for.
extension IngestAPI {
    func addAppTransactionRoutes(to router: Router<IngestRequestContext>, store: any AppTransactionCatalog) {
        router.post("/client/app-transactions") { request, context in
            try await submitAppTransaction(request, context: context, store: store)
        }
        router.get("/client/app-transactions") { request, context in
            try await appTransactions(request, context: context, store: store)
        }
    }

    func submitAppTransaction(_ request: Request, context: IngestRequestContext, store: any AppTransactionCatalog) async throws -> Response {
        let (app, parsed): (AppRecord, JSONValue)
        switch try await jsonSubmission(request, context: context) {
        case .success(let found): (app, parsed) = found
        case .failure(let refusal): return refusal.response
        }
        let submit: SubmitAppTransactionRequest
        switch SubmitAppTransactionRequest.parse(parsed) {
        case .success(let value): submit = value
        case .failure(let failure): return refused(failure.errors, app: app, logger: context.logger)
        }
        guard let verifier = ingestion.signedPayloads else {
            return refused(
                [FieldError(field: "signed_app_transaction", reason: "cannot be checked here: no trust roots are configured")], app: app,
                logger: context.logger)
        }
        let payload: JWSAppTransactionPayload
        switch verifier.verify(submit.signedAppTransaction) {
        case .success(let verified):
            guard let decoded = try? JWSAppTransactionPayload(json: verified.payload) else {
                return refused(
                    [FieldError(field: "signed_app_transaction", reason: "is signed by Apple but is not an app transaction")], app: app,
                    logger: context.logger)
            }
            payload = decoded
        case .failure(let failure):
            return forgedAppTransaction(failure, app: app, logger: context.logger)
        }
        if let failure = JWSExpectation(bundleIDs: app.bundleIDs, appAppleID: app.appAppleID).failure(for: payload.json) {
            return forgedAppTransaction(failure, app: app, logger: context.logger)
        }
        // Only the App Store's two environments are a customer's; Xcode and StoreKit testing
        // sign locally, and an app that rejects the sandbox rejects its app transactions too.
        switch payload.environment {
        case "Production", nil: break
        case "Sandbox" where app.sandboxPolicy != .reject: break
        default: return forgedAppTransaction(.environmentMismatch, app: app, logger: context.logger)
        }
        let record = AppTransactionRecord(payload, appID: app.id, userIdentifier: submit.userIdentifier, at: now())
        do {
            let stored = try await store.store(record)
            return jsonBytes(.ok, Self.appTransactionBody(stored))
        } catch {
            return lookupFailed(error, field: "user_identifier", logger: context.logger)
        }
    }

    func appTransactions(_ request: Request, context: IngestRequestContext, store: any AppTransactionCatalog) async throws -> Response {
        await userLookup(request, context: context, user: request.uri.queryParameters.get("user_identifier")) { app, user in
            let found = try await store.appTransactions(appID: app.id, userIdentifier: user)
            var writer = JSONWriter(capacity: 1024)
            writer.openObject()
            writer.key("app_transactions")
            writer.openArray()
            for record in found { record.write(to: &writer) }
            writer.closeArray()
            writer.member("user_identifier", user)
            writer.closeObject()
            return writer.bytes
        }
    }

    /// 402, as a forged receipt or transaction is answered, with the bounded reason; nothing is stored.
    private func forgedAppTransaction(_ failure: JWSFailure, app: AppRecord, logger: Logger) -> Response {
        logger.info(
            "App transaction refused as forged",
            metadata: ["app.id": "\(app.id.uuidString.lowercased())", "fraud_reason": "\(failure.reason)"])
        return json(
            .paymentRequired,
            ["error": .string("the app transaction is not Apple's or not this app's"), "fraud_reason": .string(failure.reason)])
    }

    static func appTransactionBody(_ record: AppTransactionRecord) -> [UInt8] {
        var writer = JSONWriter(capacity: 1024)
        writer.openObject()
        writer.key("app_transaction")
        record.write(to: &writer)
        writer.closeObject()
        return writer.bytes
    }
}

/// The body of `POST /client/app-transactions`.
public struct SubmitAppTransactionRequest: Sendable, Equatable {
    /// `signed_app_transaction`: StoreKit 2's `AppTransaction.shared` `jwsRepresentation`.
    public var signedAppTransaction: String
    /// Whose app transaction it is, in the backend's words.
    public var userIdentifier: String

    /// Validates a parsed JSON body.
    /// - Returns: the request, or every field error found.
    public static func parse(_ body: JSONValue) -> Result<SubmitAppTransactionRequest, FieldErrors> {
        guard let object = body.objectValue else {
            return .failure(FieldErrors([FieldError(field: "body", reason: "must be a JSON object")]))
        }
        var errors: [FieldError] = []
        var jws: String?
        switch object["signed_app_transaction"] {
        case nil: errors.append(FieldError(field: "signed_app_transaction", reason: "is required"))
        case .string(let text)?:
            if text.utf8.count > CompactJWS.maxLength {
                errors.append(FieldError(field: "signed_app_transaction", reason: "must be at most \(CompactJWS.maxLength) bytes"))
            } else if !CompactJWS.looksLikeJWS(text) {
                errors.append(FieldError(field: "signed_app_transaction", reason: "is not a compact JWS (three base64url segments)"))
            } else {
                jws = text
            }
        default: errors.append(FieldError(field: "signed_app_transaction", reason: "must be a string"))
        }
        var user: String?
        switch object["user_identifier"] {
        case nil: errors.append(FieldError(field: "user_identifier", reason: "is required"))
        case .string(let text)?:
            if text.isEmpty || text.unicodeScalars.count > 255 {
                errors.append(FieldError(field: "user_identifier", reason: "must be 1 to 255 characters"))
            } else {
                user = text
            }
        default: errors.append(FieldError(field: "user_identifier", reason: "must be a string"))
        }
        guard errors.isEmpty, let jws, let user else { return .failure(FieldErrors(errors)) }
        return .success(SubmitAppTransactionRequest(signedAppTransaction: jws, userIdentifier: user))
    }
}
