import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore

/// The refund defence's policy in the admin API:
///
/// - `GET /admin/api/apps/{app_id}/consumption-policy`: `{"policy"}`.
/// - `PUT /admin/api/apps/{app_id}/consumption-policy` with `{"policy": "off"|"neutral"|"prefer_decline"|"prefer_grant"}`
///   (role `admin`), audited (`app.consumption_policy`).
extension AdminAPI {
    func addConsumptionPolicyRoutes<Context: AdminRequestContext>(to group: RouterGroup<Context>) {
        guard let consumptionPolicies else { return }
        group.get("apps/{app_id}/consumption-policy") { request, context in
            await authorized(request, context, .viewer) { _ in
                guard let appID = context.parameters.get("app_id").flatMap(UUID.init(uuidString:)) else { return notFound() }
                return await answer(context) {
                    guard let policy = try await consumptionPolicies.policy(appID: appID) else { return notFound() }
                    return json(.ok, .object(["policy": .string(policy.rawValue)]))
                }
            }
        }
        group.put("apps/{app_id}/consumption-policy") { request, context in
            await authorized(request, context, .admin) { user in
                let appID: UUID
                let policy: ConsumptionPolicy
                switch await appSetting(request, context, field: "policy", of: "a consumption policy", as: ConsumptionPolicy.self) {
                case .success(let (app, value)): (appID, policy) = (app, value)
                case .failure(let refused): return refused.response
                }
                return await answer(context) {
                    let audit = user.audit("app.consumption_policy", source: "api", target: "consumption policy \(policy.rawValue)", appID: appID)
                    guard try await consumptionPolicies.setPolicy(policy, appID: appID, audit: audit) else { return notFound() }
                    return json(.ok, .object(["policy": .string(policy.rawValue)]))
                }
            }
        }
    }
}
