import DevTools
import Foundation
import HTTPTypes
import Hummingbird
import ReceiptCore
import Synchronization

/// The mock's support endpoints of the App Store Server API, in Apple's shapes, with the same JWT
/// check, scripted rules (any status, error code, `429` with a millisecond `Retry-After`) and call
/// counts as the rest of it:
///
/// - `GET …/inApps/v1/lookup/{orderId}`: Look Up Order ID (the mock's order ids are its transaction
///   ids; any other is `status` 1).
/// - `PUT …/inApps/v1/subscriptions/extend/{originalTransactionId}` `{"extendByDays", "extendReasonCode",
///   "requestIdentifier"}`: moves the subscription's latest `expiresDate` (once per request identifier);
///   `4000009` over 90 days, `4000010` a bad reason, `4000011` a bad identifier, `4040005` unknown,
///   `success: false` for a revoked or expired subscription.
/// - `POST …/inApps/v1/subscriptions/extend/mass` `{"extendByDays", "extendReasonCode", "requestIdentifier",
///   "productId", "storefrontCountryCodes"?}`; `GET …/extend/mass/{productId}/{requestIdentifier}`:
///   `complete: false` the first time it is asked, then complete (the mock records the request and
///   extends nobody: its counts are 0).
/// - `PUT …/inApps/v1/transactions/{originalTransactionId}/appAccountToken` `{"appAccountToken"}`:
///   `4000183` for a token that is not a UUID, `4040010` unknown.
/// - `PUT …/inApps/v2/transactions/consumption/{transactionId}` (Send Consumption Information v2)
///   `{"customerConsented", "deliveryStatus", "sampleContentProvided", "consumptionPercentage"?,
///   "refundPreference"?}`: `202` and the body recorded (``MockSupportState/consumptionRequests``);
///   `400` for a body Apple refuses (consent not `true`, a value outside Apple's lists).
extension MockServerAPI {
    static func addSupportRoutes(to router: Router<BasicRequestContext>, state: MockAppStoreState) {
        let api = state.serverAPI
        let support = api.support
        router.get("/storekit/{environment}/inApps/v1/lookup/{id}") { request, context in
            try await authorized(request, context, state: state, operation: "lookup", scripted: true) { environment, _ in
                // The mock's order ids are its transaction ids; any other order id (letters and
                // digits, as Apple's are) is one Apple does not know: `status` 1, HTTP 200.
                guard let id = context.parameters.get("id"), let transactions = api.history(of: id, in: environment) else {
                    return json(["status": .number(1)])
                }
                return json([
                    "status": .number(0), "signedTransactions": .array(try transactions.map { .string(try api.authority.sign(api.signed($0))) }),
                ])
            }
        }
        router.put("/storekit/{environment}/inApps/v1/subscriptions/extend/{id}") { request, context in
            try await authorized(request, context, state: state, operation: "extend", scripted: true) { environment, bundleID in
                let body = try await request.decode(as: JSONValue.self, context: context)
                guard let id = context.parameters.get("id"), !id.isEmpty, id.utf8.allSatisfy({ (48...57).contains($0) }) else {
                    return error(400, 4_000_008)
                }
                if let failure = extensionProblem(body) { return failure }
                guard let history = api.history(of: id, in: environment),
                    let latest = history.filter({ $0["originalTransactionId"]?.stringValue == id && $0["expiresDate"] != nil })
                        .max(by: { expires($0) < expires($1) }),
                    latest["bundleId"]?.stringValue == bundleID, let latestID = latest["transactionId"]?.stringValue
                else { return error(404, 4_040_005) }
                let days = body["extendByDays"]?.intValue ?? 0
                let requestID = body["requestIdentifier"]?.stringValue ?? ""
                let eligible = latest["revocationDate"] == nil && expires(latest) > api.nowMilliseconds
                var effective = expires(latest)
                if eligible && support.firstUse(of: requestID) {
                    effective += Double(days) * 86_400_000
                    api.update(transaction: latestID, in: environment) { $0["expiresDate"] = .number(effective) }
                }
                return json([
                    "originalTransactionId": .string(id), "webOrderLineItemId": latest["webOrderLineItemId"] ?? .string(latestID),
                    "success": .bool(eligible), "effectiveDate": .number(effective),
                ])
            }
        }
        router.post("/storekit/{environment}/inApps/v1/subscriptions/extend/mass") { request, context in
            try await authorized(request, context, state: state, operation: "mass_extend", scripted: true) { environment, bundleID in
                let body = try await request.decode(as: JSONValue.self, context: context)
                if let failure = extensionProblem(body) { return failure }
                guard let product = body["productId"]?.stringValue, !product.isEmpty else { return error(400, 4_000_023) }
                support.startMass(
                    requestIdentifier: body["requestIdentifier"]?.stringValue?.lowercased() ?? "", productID: product, bundleID: bundleID,
                    environment: environment)
                return json(["requestIdentifier": body["requestIdentifier"] ?? .null])
            }
        }
        router.get("/storekit/{environment}/inApps/v1/subscriptions/extend/mass/{product}/{request}") { request, context in
            try await authorized(request, context, state: state, operation: "mass_extend_status", scripted: true) { environment, bundleID in
                guard let product = context.parameters.get("product"), let requestID = context.parameters.get("request")?.lowercased(),
                    let status = support.massStatus(requestIdentifier: requestID, productID: product, bundleID: bundleID, environment: environment)
                else { return error(404, 4_040_009) }
                var answer: [String: JSONValue] = ["requestIdentifier": .string(requestID), "complete": .bool(status.complete)]
                if status.complete {
                    answer["completeDate"] = .number(api.nowMilliseconds)
                    answer["succeededCount"] = .number(0)
                    answer["failedCount"] = .number(0)
                }
                return json(answer)
            }
        }
        router.put("/storekit/{environment}/inApps/v1/transactions/{id}/appAccountToken") { request, context in
            try await authorized(request, context, state: state, operation: "app_account_token", scripted: true) { environment, bundleID in
                let body = try await request.decode(as: JSONValue.self, context: context)
                guard let token = body["appAccountToken"]?.stringValue, UUID(uuidString: token) != nil else { return error(400, 4_000_183) }
                guard let id = context.parameters.get("id"), let history = api.history(of: id, in: environment),
                    history.first?["bundleId"]?.stringValue == bundleID
                else { return error(404, 4_040_010) }
                for transaction in history where transaction["originalTransactionId"]?.stringValue == id {
                    guard let transactionID = transaction["transactionId"]?.stringValue else { continue }
                    api.update(transaction: transactionID, in: environment) { $0["appAccountToken"] = .string(token.lowercased()) }
                }
                return Response(status: .ok)
            }
        }
        router.put("/storekit/{environment}/inApps/v2/transactions/consumption/{id}") { request, context in
            try await authorized(request, context, state: state, operation: "consumption", scripted: true) { environment, _ in
                let body = try await request.decode(as: JSONValue.self, context: context)
                guard let id = context.parameters.get("id"), !id.isEmpty, id.utf8.allSatisfy({ (48...57).contains($0) }) else {
                    return error(400, 4_000_006)
                }
                guard consumptionBodyIsValid(body) else { return error(400, 4_000_183) }
                support.received(MockConsumptionRequest(environment: environment, transactionID: id, body: body))
                return Response(status: .accepted)
            }
        }
    }

    /// Apple's checks of a consumption body: consent `true`, the documented values only.
    private static func consumptionBodyIsValid(_ body: JSONValue) -> Bool {
        guard body["customerConsented"]?.boolValue == true, body["sampleContentProvided"]?.boolValue != nil,
            let delivery = body["deliveryStatus"]?.stringValue, ConsumptionDeliveryStatus(rawValue: delivery) != nil
        else { return false }
        if let percentage = body["consumptionPercentage"], !(percentage.intValue.map { (0...100_000).contains($0) } ?? false) { return false }
        if let preference = body["refundPreference"], preference.stringValue.flatMap(RefundPreference.init(rawValue:)) == nil { return false }
        return true
    }

    /// Apple's checks of an extension's body: days 1–90, reason 0–3, a UUID request identifier.
    private static func extensionProblem(_ body: JSONValue) -> Response? {
        guard let days = body["extendByDays"]?.intValue, (1...90).contains(days) else { return error(400, 4_000_009) }
        guard let reason = body["extendReasonCode"]?.intValue, (0...3).contains(reason) else { return error(400, 4_000_010) }
        guard let id = body["requestIdentifier"]?.stringValue, UUID(uuidString: id) != nil else { return error(400, 4_000_011) }
        return nil
    }
}

/// The mock's memory of support requests: the request identifiers already used (an extension
/// is applied once) and the mass extensions with how often their status was asked. Thread-safe.
public final class MockSupportState: Sendable {
    struct Mass {
        var productID: String
        var bundleID: String
        var environment: AppStoreEnvironment
        var asked = 0
    }

    private let storage = Mutex((used: Set<String>(), mass: [String: Mass](), consumption: [MockConsumptionRequest]()))

    func received(_ request: MockConsumptionRequest) {
        storage.withLock { $0.consumption.append(request) }
    }

    /// Every Send Consumption Information the mock took, oldest first.
    public var consumptionRequests: [MockConsumptionRequest] { storage.withLock { $0.consumption } }

    /// Whether `requestIdentifier` is used for the first time (and marks it used).
    func firstUse(of requestIdentifier: String) -> Bool {
        storage.withLock { $0.used.insert(requestIdentifier.lowercased()).inserted }
    }

    func startMass(requestIdentifier: String, productID: String, bundleID: String, environment: AppStoreEnvironment) {
        storage.withLock { storage in
            if storage.mass[requestIdentifier] == nil {
                storage.mass[requestIdentifier] = Mass(productID: productID, bundleID: bundleID, environment: environment)
            }
        }
    }

    /// A mass extension's status: in progress the first time it is asked, then complete.
    func massStatus(
        requestIdentifier: String, productID: String, bundleID: String, environment: AppStoreEnvironment
    ) -> (complete: Bool, asked: Int)? {
        let asked: Int? = storage.withLock { storage in
            guard var mass = storage.mass[requestIdentifier], mass.productID == productID, mass.bundleID == bundleID,
                mass.environment == environment
            else { return nil }
            mass.asked += 1
            storage.mass[requestIdentifier] = mass
            return mass.asked
        }
        guard let asked else { return nil }
        return (asked > 1, asked)
    }

    /// The mass extensions asked for so far.
    public var massRequests: Int { storage.withLock { $0.mass.count } }
}

/// One Send Consumption Information request the mock took.
public struct MockConsumptionRequest: Sendable, Equatable {
    public var environment: AppStoreEnvironment
    public var transactionID: String
    /// The body as sent.
    public var body: JSONValue
}
