import Foundation
import Hummingbird
import ReceiptCore

/// The customer API: `GET /client/customers/{user_identifier}` answers what a user is entitled to
/// by name (the app's entitlement catalogue applied to their purchases, subscriptions and
/// operators' grants), with the purchases, subscriptions and grants behind it.
extension IngestAPI {
    func addCustomerRoutes(to router: Router<IngestRequestContext>, catalog: any CustomerCatalog) {
        router.get("/client/customers/{user_identifier}") { request, context in
            // The router hands the segment over as sent: `a%20b` is the user `a b`.
            await userLookup(request, context: context, user: context.parameters.get("user_identifier")?.removingPercentEncoding) { app, user in
                try await catalog.customer(appID: app.id, userIdentifier: user).encoded(at: now(), sandboxPolicy: app.sandboxPolicy)
            }
        }
    }
}
