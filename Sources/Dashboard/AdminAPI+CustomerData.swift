import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ReceiptCore

/// A customer's data in the admin API, for the requests the law gives them:
///
/// - `GET /admin/api/customers/{app_id}/{user_identifier}/export` (role `operator`): everything
///   receiptq holds about the user (and every id merged with it) as one JSON document, streamed a
///   page at a time from one snapshot. Audited (`customer.export`) before a byte is read.
/// - `DELETE /admin/api/customers/{app_id}/{user_identifier}` (role `operator`): erases the user
///   and every id merged with it (``CustomerEraser``): 200 with the erasure's id and the count of
///   dropped jobs, 404 when nothing holds the user (never seen, or erased already). Audited
///   (`customer.erase`, naming the erasure, not the user) in the erasure's transaction.
extension AdminAPI {
    func addCustomerDataRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        addErasureRoute(to: group)
        guard let customerData else { return }
        group.get("customers/{app_id}/{user_identifier}/export") { request, context in
            await authorized(request, context, .operator) { user in
                guard let (appID, customer) = Self.customer(context) else { return notFound() }
                let at = now()
                return await answer(context) {
                    // Who read whose data, and when: written before the export starts (no line, no export).
                    let audit = user.audit("customer.export", source: "api", target: "user \(customer)", appID: appID, users: [customer])
                    try await actions.run(audit) {}
                    let body = ResponseBody { writer in
                        try await customerData.export(appID: appID, userIdentifier: customer, at: at) { piece in
                            try await writer.write(ByteBuffer(string: piece))
                        }
                        try await writer.finish(nil)
                    }
                    return Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8"], body: body)
                }
            }
        }
    }
}

extension AdminAPI {
    fileprivate func addErasureRoute<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        guard let eraser else { return }
        group.delete("customers/{app_id}/{user_identifier}") { request, context in
            await authorized(request, context, .operator) { user in
                guard let (appID, customer) = Self.customer(context) else { return notFound() }
                return await answer(context) {
                    let audit = user.audit("customer.erase", source: "api", appID: appID)
                    guard let (erased, dropped) = try await eraser.erase(appID: appID, userIdentifier: customer, audit: audit, at: now()) else {
                        return notFound()
                    }
                    return json(.ok, AdminJSON.erasure(erased, droppedJobs: dropped))
                }
            }
        }
    }
}

extension AdminJSON {
    /// An erasure's answer: its id (the audit line's and the `customer.erased` event's), the ids
    /// it covered (the operator's request named one of them) and the jobs dropped.
    static func erasure(_ erased: ErasedCustomer, droppedJobs: Int) -> JSONValue {
        .object([
            "erasure_id": .string(erased.erasureID.canonical), "app_id": .string(erased.appID.canonical),
            "user_identifiers": .array(erased.userIdentifiers.sorted().map(JSONValue.string)), "dropped_jobs": .number(Double(droppedJobs)),
        ])
    }
}
