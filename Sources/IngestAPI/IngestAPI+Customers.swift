import Foundation
import Hummingbird
import ReceiptCore

/// The customer API: `GET /client/customers/{user_identifier}` answers what a user is entitled to
/// by name (the app's entitlement catalogue applied to their purchases, subscriptions and
/// operators' grants), with the purchases, subscriptions and grants behind it.
extension IngestAPI {
    func addCustomerRoutes(to router: Router<IngestRequestContext>, catalog: any CustomerCatalog) {
        router.get("/client/customers/{user_identifier}") { request, context in
            let app: AppRecord
            switch await authorize(request, context: context) {
            case .success(let found): app = found
            case .failure(let refusal): return refusal.response
            }
            // The router hands the segment over as sent: `a%20b` is the user `a b`.
            let user: String
            switch Self.userIdentifier(context.parameters.get("user_identifier")?.removingPercentEncoding) {
            case .success(let value): user = value
            case .failure(let refusal): return unprocessable([refusal])
            }
            do {
                let customer = try await catalog.customer(appID: app.id, userIdentifier: user)
                return jsonBytes(.ok, customer.encoded(at: now(), sandboxPolicy: app.sandboxPolicy))
            } catch {
                return lookupFailed(error, field: "user_identifier", logger: context.logger)
            }
        }
    }
}
