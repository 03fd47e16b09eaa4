import Foundation
import Hummingbird
import ReceiptCore

/// The customer view's "Resync history" button (issue 42, item 2): `POST /admin/customers/resync`
/// (role `operator`, CSRF-checked) queues a job that reads the customer's whole transaction
/// history again from its first page, audited as `customer.resync`, then goes back to the
/// customer with a notice.
extension AdminPages {
    func addResyncRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        guard let resync else { return }
        router.post("/admin/customers/resync") { request, context in
            try await withForm(request, context: context, role: .operator) { form, user, _ in
                var back = URLComponents()
                back.path = "/admin/customers"
                back.queryItems = [("q", form["return_q"]), ("by", form["return_by"])].compactMap { name, value in
                    value.map { URLQueryItem(name: name, value: $0) }
                }
                func done(_ outcome: String) -> Response {
                    back.queryItems = (back.queryItems ?? []) + [URLQueryItem(name: "resync", value: outcome)]
                    return redirect(back.string ?? "/admin/customers")
                }
                guard let appID = form["app_id"].flatMap(UUID.init(uuidString:)),
                    let request = try? ResyncRequest.validated(
                        appID: appID, originalTransactionID: form["original_transaction_id"] ?? "", environment: form["environment"],
                        userIdentifier: form["user_identifier"])
                else { return done("invalid") }
                let action = user.audit(
                    "customer.resync", source: "dashboard", target: "original transaction \(request.originalTransactionID)", appID: appID,
                    users: request.userIdentifier.map { [$0] } ?? [])
                do {
                    _ = try await actions.run(action, jobCount: { _ in 1 }) { () async throws -> UUID in try await resync.resync(request) }
                    return done("queued")
                } catch let failure as ResyncFailure {
                    return done(failure == .noServerAPIKey ? "no_key" : failure == .unknownApp ? "invalid" : "unavailable")
                }
            }
        }
    }

    /// The notice a resync's redirect asks for: a fixed text, never one taken from the URL.
    static func resyncNotice(_ outcome: String?) -> (text: String, isProblem: Bool)? {
        switch outcome {
        case "queued": ("History resync queued: the customer's whole history is read again and stored.", false)
        case "invalid": ("Nothing was queued: that is not an app's original transaction id.", true)
        case "no_key": ("Nothing was queued: the app has no In-App Purchase key.", true)
        case "unavailable": ("Nothing was queued: the queue or the database did not answer; try again.", true)
        default: nil
        }
    }
}
