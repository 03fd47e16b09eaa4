import Foundation
import Hummingbird
import ReceiptCore

/// The resync of a customer's history in the admin API (issue 42, item 2):
///
/// - `POST /admin/api/history/resync` with `{"app_id", "original_transaction_id", "environment"?,
///   "user_identifier"?}` (role `operator`): 202 with the queued job's id. The job is a normal
///   validation, queued through the one queue, that reads the customer's whole transaction
///   history from its first page (the stored revision is not used, and is replaced by the read's
///   end). Audited as `customer.resync` before it is queued.
extension AdminAPI {
    func addResyncRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        guard let resync else { return }
        group.post("history/resync") { request, context in
            await authorized(request, context, .operator) { user in
                let parsed: ResyncRequest
                switch await jsonBody(request).flatMap(Self.resyncRequest) {
                case .success(let value): parsed = value
                case .failure(let refusal): return refusal.response
                }
                let action = user.audit(
                    "customer.resync", source: "api", target: "original transaction \(parsed.originalTransactionID)", appID: parsed.appID,
                    users: parsed.userIdentifier.map { [$0] } ?? [])
                return await answer(context) {
                    do {
                        let id = try await actions.run(action, jobCount: { _ in 1 }) { () async throws -> UUID in try await resync.resync(parsed) }
                        return json(.accepted, .object(["job_id": .string(id.canonical), "status": .string("queued")]))
                    } catch let failure as ResyncFailure {
                        return Self.resyncRefusal(failure).response
                    }
                }
            }
        }
    }

    /// The request's fields, or the 422 naming the first bad one.
    static func resyncRequest(_ body: JSONValue) -> Result<ResyncRequest, Refusal> {
        guard let appText = body["app_id"]?.stringValue, let appID = UUID(uuidString: appText) else {
            return .failure(.unprocessable(field: "app_id", reason: "must be an app's id (a UUID)"))
        }
        guard let original = body["original_transaction_id"]?.stringValue else {
            return .failure(.unprocessable(field: "original_transaction_id", reason: "is required (a string of digits)"))
        }
        for field in ["environment", "user_identifier"] where body[field] != nil && body[field] != .null && body[field]?.stringValue == nil {
            return .failure(.unprocessable(field: field, reason: "must be a string"))
        }
        do {
            return .success(
                try ResyncRequest.validated(
                    appID: appID, originalTransactionID: original, environment: body["environment"]?.stringValue,
                    userIdentifier: body["user_identifier"]?.stringValue))
        } catch {
            return .failure(.unprocessable(field: error.field, reason: error.reason))
        }
    }

    /// A resync the system refused: an unknown app is 404, an app without a key 409, an outage 503.
    static func resyncRefusal(_ failure: ResyncFailure) -> Refusal {
        switch failure {
        case .unknownApp: Refusal(response: notFound())
        case .noServerAPIKey:
            Refusal(
                response: json(
                    .conflict,
                    .object(["error": .string("the app has no In-App Purchase key: add one with `receiptq apps server-api-key`")])))
        case .unavailable: .unavailable
        }
    }
}
