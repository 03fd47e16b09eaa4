import DevTools
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import OpenSSL
import ReceiptCore

/// The mock's App Store Server API, under `/storekit/production` and `/storekit/sandbox`:
/// Get Transaction Info, Get Transaction History (v2, pages of 20 with a revision token), Get All
/// Subscription Statuses, Look Up Order ID and Get Refund History, answered from
/// ``MockServerAPIState``'s ledger with JWS signed by its mock Apple chain.
///
/// Like Apple: every call needs a valid ES256 JWT from a registered key (401 otherwise, no
/// detail); a transaction of the other environment (or none) is `404 {"errorCode":4040010}`;
/// production answers 401 for an app with no live release; scripted rules give any status,
/// error code, delay or `429` with a millisecond `Retry-After`.
enum MockServerAPI {
    static let pageSize = 20

    static func addRoutes(to router: Router<BasicRequestContext>, state: MockAppStoreState) {
        let api = state.serverAPI
        router.get("/storekit/{environment}/inApps/v1/transactions/{id}") { request, context in
            try await answer(request, context, state: state, operation: "info") { environment, id, bundleID in
                guard let transaction = api.transaction(id, in: environment, bundleID: bundleID) else { return notFound() }
                return json(["signedTransactionInfo": .string(try api.authority.sign(api.signed(transaction)))])
            }
        }
        router.get("/storekit/{environment}/inApps/v2/history/{id}") { request, context in
            try await answer(request, context, state: state, operation: "history") { environment, id, bundleID in
                guard var transactions = api.history(of: id, in: environment, bundleID: bundleID) else { return notFound() }
                if request.uri.queryParameters["sort"].map(String.init) == "DESCENDING" { transactions.reverse() }
                let start = request.uri.queryParameters["revision"].flatMap { Int(String($0)) } ?? 0
                guard start >= 0, start <= transactions.count else { return error(400, 4_000_005) }
                // Where each read started: a test checks an incremental read sent the stored revision.
                api.count("\(environment.rawValue) history from \(start)")
                let page = transactions[start..<min(start + pageSize, transactions.count)]
                let next = start + page.count
                return json([
                    "signedTransactions": .array(try page.map { .string(try api.authority.sign(api.signed($0))) }),
                    "revision": .string(String(next)), "hasMore": .bool(next < transactions.count), "bundleId": .string(bundleID),
                    "appAppleId": .number(1_234_567_890), "environment": .string(environment == .production ? "Production" : "Sandbox"),
                ])
            }
        }
        router.get("/storekit/{environment}/inApps/v1/subscriptions/{id}") { request, context in
            try await answer(request, context, state: state, operation: "statuses") { environment, id, bundleID in
                guard let transactions = api.history(of: id, in: environment, bundleID: bundleID) else { return notFound() }
                return json([
                    "environment": .string(environment == .production ? "Production" : "Sandbox"), "bundleId": .string(bundleID),
                    "appAppleId": .number(1_234_567_890),
                    "data": .array(try statuses(transactions, environment: environment, api: api)),
                ])
            }
        }
        // Look Up Order ID: MockServerAPI+Support.swift (order ids are letters and digits).
        router.get("/storekit/{environment}/inApps/v2/refund/lookup/{id}") { request, context in
            try await answer(request, context, state: state, operation: "refunds") { environment, id, _ in
                guard let transactions = api.history(of: id, in: environment) else { return notFound() }
                let refunded = transactions.filter { $0["revocationDate"] != nil }
                return json([
                    "signedTransactions": .array(try refunded.map { .string(try api.authority.sign(api.signed($0))) }),
                    "revision": .string(String(refunded.count)), "hasMore": .bool(false),
                ])
            }
        }
    }

    /// The checks every call shares, then `body` with the environment, the id and the token's bundle.
    static func answer(
        _ request: Request, _ context: BasicRequestContext, state: MockAppStoreState, operation: String,
        body: (AppStoreEnvironment, String, String) throws -> Response
    ) async throws -> Response {
        let api = state.serverAPI
        guard let environmentName = context.parameters.get("environment"), let environment = AppStoreEnvironment(rawValue: environmentName),
            let id = context.parameters.get("id")
        else { return Response(status: .notFound) }
        api.count("\(environment.rawValue) \(operation)")
        api.count("\(environment.rawValue) all")
        let path = request.uri.path.replacingOccurrences(of: "/storekit/\(environment.rawValue)", with: "")
        let rule = api.takeRule(path: path)
        let delay = state.baseDelay + .milliseconds(rule?.delayMs ?? 0)
        if delay > .zero { try await Task.sleep(for: delay) }
        guard let bundleID = authorizedBundle(request, api: api) else { return Response(status: .unauthorized) }
        if environment == .production && api.isUnreleased(bundleID) { return Response(status: .unauthorized) }
        if let rule, rule.httpStatus != nil || rule.errorCode != nil {
            var response = error(rule.httpStatus ?? 500, rule.errorCode)
            if let retryAfter = rule.retryAfterMs, let name = HTTPField.Name("Retry-After") {
                response.headers[name] = String(retryAfter)
            }
            return response
        }
        guard !id.isEmpty, id.utf8.allSatisfy({ (48...57).contains($0) }) else { return error(400, 4_000_006) }
        // Taken before the ledger is read: an answer counts as news of every change made before it.
        let asked = api.now()
        let response = try body(environment, id, bundleID)
        if response.status == .ok { api.answered(about: id, in: environment, at: asked) }
        return response
    }

    /// The bundle id of a valid bearer JWT, or nil: signed ES256 by a registered key, `aud`
    /// `appstoreconnect-v1`, not expired, living at most an hour, `bid` the key's app.
    static func authorizedBundle(_ request: Request, api: MockServerAPIState, now: Date = Date()) -> String? {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { return nil }
        let parts = header.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2]),
            let jwtHeader = try? JSONDecoder().decode(JSONValue.self, from: Data(headerBytes)),
            let claims = try? JSONDecoder().decode(JSONValue.self, from: Data(claimBytes)),
            jwtHeader["alg"]?.stringValue == "ES256", let keyID = jwtHeader["kid"]?.stringValue, let key = api.key(keyID),
            ES256.verify(signature: signature, of: Array("\(parts[0]).\(parts[1])".utf8), key: key.publicKey),
            claims["aud"]?.stringValue == "appstoreconnect-v1", claims["iss"]?.stringValue == key.issuerID,
            claims["bid"]?.stringValue == key.bundleID,
            let issuedAt = claims["iat"]?.stringValue.flatMap(Double.init), let expiresAt = claims["exp"]?.stringValue.flatMap(Double.init),
            expiresAt > now.timeIntervalSince1970, expiresAt - issuedAt <= 3600, issuedAt <= now.timeIntervalSince1970 + 60
        else { return nil }
        api.accepted(token: String(header.dropFirst(7)))
        return key.bundleID
    }

    /// Get All Subscription Statuses' `data`: per group, each subscription's latest transaction,
    /// its status (1 active, 2 expired, 3 billing retry, 4 grace, 5 revoked) and renewal info.
    private static func statuses(_ transactions: [JSONValue], environment: AppStoreEnvironment, api: MockServerAPIState) throws -> [JSONValue] {
        let subscriptions = transactions.filter { $0["expiresDate"] != nil }
        let originals = Set(subscriptions.compactMap { $0["originalTransactionId"]?.stringValue })
        var groups: [String: [JSONValue]] = [:]
        for original in originals.sorted() {
            guard let current = api.subscription(original, among: subscriptions, in: environment) else { continue }
            let group = current.latest["subscriptionGroupIdentifier"]?.stringValue ?? "group"
            groups[group, default: []].append(
                .object([
                    "status": .number(Double(current.status)), "originalTransactionId": .string(original),
                    "signedTransactionInfo": .string(try api.authority.sign(api.signed(current.latest))),
                    "signedRenewalInfo": .string(try api.authority.sign(current.renewal)),
                ]))
        }
        return groups.keys.sorted().map { .object(["subscriptionGroupIdentifier": .string($0), "lastTransactions": .array(groups[$0] ?? [])]) }
    }

    static func expires(_ transaction: JSONValue) -> Double { transaction["expiresDate"]?.stringValue.flatMap(Double.init) ?? 0 }

    static func notFound() -> Response { error(404, 4_040_010) }

    static func error(_ status: Int, _ code: Int?) -> Response {
        let body: JSONValue = code.map { .object(["errorCode": .number(Double($0)), "errorMessage": .string("mock error \($0)")]) } ?? .object([:])
        var response = json(body.objectValue ?? [:])
        response.status = HTTPResponse.Status(code: status)
        return response
    }

    static func json(_ object: [String: JSONValue]) -> Response { MockAppStore.jsonResponse(object) }
}
