import Foundation
import Hummingbird
import ReceiptCore

/// An app's transfer rule in the admin API:
///
/// - `GET /admin/api/apps/{app_id}/transfer-rule`: `{"app_id", "rule"}`.
/// - `PUT /admin/api/apps/{app_id}/transfer-rule` `{"rule": "keep_first"|"transfer_to_latest"|"share"}` (role
///   `admin`): audited as `app.transfer_rule`; applies to the transactions presented from then on.
extension AdminAPI {
    func addTransferRuleRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        guard let transferRules else { return }
        group.get("apps/{app_id}/transfer-rule") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)) else { return notFound() }
                return await answer(context) {
                    do {
                        return Self.transferRuleJSON(appID, try await transferRules.transferRule(appID: appID))
                    } catch TransferRuleAdminError.unknownApp {
                        return notFound()
                    }
                }
            }
        }
        group.put("apps/{app_id}/transfer-rule") { request, context in
            await authorized(request, context, .admin) { user in
                let appID: UUID
                let rule: TransferRule
                switch await appSetting(request, context, field: "rule", of: "a transfer rule", as: TransferRule.self) {
                case .success(let (app, value)): (appID, rule) = (app, value)
                case .failure(let refused): return refused.response
                }
                return await answer(context) {
                    do {
                        try await transferRules.setTransferRule(rule, appID: appID, audit: user.audit("app.transfer_rule", source: "api"))
                        return Self.transferRuleJSON(appID, rule)
                    } catch TransferRuleAdminError.unknownApp {
                        return notFound()
                    }
                }
            }
        }
    }

    private static func transferRuleJSON(_ appID: UUID, _ rule: TransferRule) -> Response {
        json(.ok, .object(["app_id": .string(appID.canonical), "rule": .string(rule.rawValue)]))
    }
}
