import Foundation
import Hummingbird
import ReceiptCore

extension IngestAPI {
    /// `POST /client/transactions`: a StoreKit 2 signed transaction or a transaction id, with the
    /// receipts endpoint's auth, idempotency and answers (200/206/401/402/413/422/503).
    func submitTransaction(_ request: Request, context: IngestRequestContext) async throws -> Response {
        let (app, parsed): (AppRecord, JSONValue)
        switch try await jsonSubmission(request, context: context) {
        case .success(let found): (app, parsed) = found
        case .failure(let refusal): return refusal.response
        }
        let submit: SubmitTransactionRequest
        switch SubmitTransactionRequest.parse(parsed) {
        case .success(let value): submit = value
        case .failure(let failure): return refused(failure.errors, app: app, logger: context.logger)
        }
        var submission = submit.submission
        if submit.ipAddressOmitted { submission.ipAddress = clientAddress(request, context: context) }
        switch await ingestion.ingest(transaction: submit, submission: submission, app: app, origin: .api, logger: context.logger) {
        case .success(let outcome): return answer(outcome, app: app, context: context)
        case .failure(let error): return refused([error], app: app, logger: context.logger)
        }
    }
}
