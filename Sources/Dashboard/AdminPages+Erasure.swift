import Foundation
import Hummingbird
import ReceiptCore

/// The customer view's "Erase customer" button (issue 44, item 3): `POST /admin/customers/erase`
/// (role `operator`, CSRF-checked, a confirmation box ticked) erases the user of the app and every
/// id merged with it (``CustomerEraser``; audited as `customer.erase` without the user), then goes
/// back to the customer view with a notice. A viewer is refused (403) and the refusal audited.
extension AdminPages {
    func addErasureRoutes<Context: AdminRequestContext>(to router: Router<Context>) {
        guard let eraser else { return }
        router.post("/admin/customers/erase") { request, context in
            try await withForm(request, context: context, role: .operator) { form, user, _ in
                guard let appID = form["app_id"].flatMap(UUID.init(uuidString:)), let customer = form["user_identifier"], !customer.isEmpty,
                    customer.unicodeScalars.count <= 255
                else { return redirect("/admin/customers?erased=invalid") }
                var back = URLComponents()
                back.path = "/admin/customers"
                back.queryItems = [URLQueryItem(name: "app_id", value: appID.canonical)]
                func done(_ outcome: String) -> Response {
                    back.queryItems = (back.queryItems ?? []) + [URLQueryItem(name: "erased", value: outcome)]
                    return redirect(back.string ?? "/admin/customers")
                }
                guard form["confirm"] == "1" else {
                    // Not erased: back to the same customer, to tick the box.
                    back.queryItems = (back.queryItems ?? []) + [URLQueryItem(name: "q", value: customer)]
                    return done("unconfirmed")
                }
                let audit = user.audit("customer.erase", source: "dashboard", appID: appID)
                let erased = try await eraser.erase(appID: appID, userIdentifier: customer, audit: audit, at: now())
                return done(erased == nil ? "nothing" : "done")
            }
        }
    }

    /// The notice an erasure's redirect asks for: a fixed text, never one taken from the URL.
    static func erasureNotice(_ outcome: String?) -> (text: String, isProblem: Bool)? {
        switch outcome {
        case "done": ("Customer erased: their records are deleted or anonymised and their queued jobs dropped.", false)
        case "nothing": ("Nothing was erased: nothing is held for that user (never seen, or erased already).", false)
        case "unconfirmed": ("Nothing was erased: tick the box to confirm.", true)
        case "invalid": ("Nothing was erased: that is not an app's user.", true)
        default: nil
        }
    }
}
