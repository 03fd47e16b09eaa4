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
extension AdminAPI {
    func addCustomerDataRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
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
