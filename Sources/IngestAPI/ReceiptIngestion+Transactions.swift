import Foundation
import Logging
import OpenSSL
import ReceiptCore

extension ReceiptIngestion {
    /// Checks, queues and (up to the sync wait) validates one StoreKit 2 purchase of `app`: the
    /// same rule as receipts — a forgery (not Apple's JWS, or another app's) is queued to be stored
    /// as fraud and answered 402; anything else is validated by a worker with the Server API.
    /// - Returns: the outcome, or the field error to answer 422 with (a JWS that is Apple's but not
    ///   a transaction, or a signed transaction while this node cannot check JWS).
    public func ingest(
        transaction request: SubmitTransactionRequest, submission: Submission, app: AppRecord, origin: JobOrigin, logger: Logger
    ) async -> Result<Outcome, FieldError> {
        switch plan(transaction: request, submission: submission, app: app, origin: origin, at: now()) {
        case .success(let job): .success(await enqueue(job, logger: logger))
        case .failure(let error): .failure(error)
        }
    }

    /// A transaction made into its job, with nothing written yet: the JWS check (a forgery
    /// becomes a fraud job), the envelope and the idempotency key. The single endpoint and the
    /// batch endpoint both go through it.
    /// - Returns: the job, or the field error to answer 422 with.
    func plan(
        transaction request: SubmitTransactionRequest, submission: Submission, app: AppRecord, origin: JobOrigin, at: Date
    ) -> Result<PlannedJob, FieldError> {
        let envelope: JobEnvelope
        var purchases: [InAppPurchase] = []
        let idempotencyKey: String
        switch request.proof {
        case .signedTransaction(let jws):
            guard let signedPayloads else {
                return .failure(FieldError(field: "signed_transaction", reason: "cannot be checked here: no trust roots are configured"))
            }
            idempotencyKey = Digest.hex(Digest.sha256(Array("signed_transaction\u{0}\(jws)".utf8)))
            var fraudReason: String?
            var payload: JSONValue = .object([:])
            switch signedPayloads.verify(jws) {
            case .success(let verified):
                payload = verified.payload
                guard (try? JWSTransactionPayload(json: payload)) != nil, let purchase = InAppPurchase(serverAPITransaction: payload) else {
                    return .failure(FieldError(field: "signed_transaction", reason: "is signed by Apple but is not a transaction"))
                }
                fraudReason = JWSExpectation(bundleIDs: app.bundleIDs, appAppleID: app.appAppleID).failure(for: payload)?.reason
                purchases = [purchase]
            case .failure(let failure):
                fraudReason = failure.reason
            }
            envelope = JobEnvelope(
                id: JobID.make(at: at), appID: app.id, enqueuedAt: at, origin: origin,
                payload: .transaction(
                    TransactionJob(
                        signedTransaction: jws,
                        // A forged JWS names no transaction: its ids are the attacker's.
                        transactionID: fraudReason == nil ? payload["transactionId"]?.stringValue : nil,
                        bundleID: payload["bundleId"]?.stringValue, environment: payload["environment"]?.stringValue?.lowercased(),
                        submission: submission, fraudReason: fraudReason)))
        case .transactionID(let id, let environment):
            idempotencyKey = Digest.hex(Digest.sha256(Array("transaction_id\u{0}\(environment?.rawValue ?? "")\u{0}\(id)".utf8)))
            envelope = JobEnvelope(
                id: JobID.make(at: at), appID: app.id, enqueuedAt: at, origin: origin,
                payload: .transaction(
                    TransactionJob(
                        signedTransaction: nil, transactionID: id, bundleID: app.bundleID, environment: environment?.rawValue,
                        submission: submission)))
        }
        return .success(PlannedJob(envelope, purchases: purchases, idempotencyKey: idempotencyKey))
    }
}
