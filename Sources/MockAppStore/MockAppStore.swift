import DevTools
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ReceiptCore
import ServiceLifecycle

/// A stand-in for Apple's `verifyReceipt`, used in development, tests and the benchmark.
///
/// It decodes each receipt (so the answer matches what the receipt holds), applies Apple's
/// environment rules (a sandbox receipt at production answers 21007, the reverse 21008), checks
/// the shared secret when one is configured for the bundle id (21004), and can be scripted with
/// ``MockRule``s to answer any status, delay, HTTP error or non-JSON body.
///
/// ```swift
/// let mock = try await MockAppStore.start(state: MockAppStoreState())
/// // point the client at mock.productionURL / mock.sandboxURL
/// await mock.stop()
/// ```
public enum MockAppStore {
    /// The largest request body accepted (Apple's receipts are a few KB; real ones can be larger).
    static let maxBodySize = 4 << 20

    /// The mock's routes: `POST /verifyReceipt` (production), `POST /sandbox/verifyReceipt`,
    /// `POST /mock/rules`, `DELETE /mock/rules`, `POST /mock/secrets`, `POST /mock/renewals`.
    public static func router(state: MockAppStoreState) -> Router<BasicRequestContext> {
        let router = Router()
        router.post("/verifyReceipt") { request, _ in
            try await verifyReceipt(request, endpoint: .production, state: state)
        }
        router.post("/sandbox/verifyReceipt") { request, _ in
            try await verifyReceipt(request, endpoint: .sandbox, state: state)
        }
        router.post("/mock/rules") { request, context -> Response in
            let rule = try await request.decode(as: MockRule.self, context: context)
            state.addRule(rule)
            return Response(status: .created)
        }
        router.delete("/mock/rules") { _, _ -> Response in
            state.clearRules()
            return Response(status: .noContent)
        }
        router.post("/mock/renewals") { request, context -> Response in
            // {"original_transaction_id", "transaction_id", "product_id", "purchase_date_ms", "expires_date_ms",
            //  "pending_renewal_info": {…}}: a renewal, and/or fields of the renewal info.
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let original = body["original_transaction_id"]?.stringValue else { return Response(status: .badRequest) }
            if let expires = body["expires_date_ms"]?.stringValue.flatMap(Double.init) {
                let purchased = body["purchase_date_ms"]?.stringValue.flatMap(Double.init) ?? Date().timeIntervalSince1970 * 1000
                state.addRenewal(
                    InAppPurchase(
                        productID: body["product_id"]?.stringValue ?? "renewal",
                        transactionID: body["transaction_id"]?.stringValue
                            ?? String(Int64(purchased)), originalTransactionID: original,
                        purchaseDate: Date(timeIntervalSince1970: purchased / 1000), expiresDate: Date(timeIntervalSince1970: expires / 1000)))
            }
            if let fields = body["pending_renewal_info"]?.objectValue { state.setRenewalInfo(fields, originalTransactionID: original) }
            return Response(status: .created)
        }
        MockServerAPI.addRoutes(to: router, state: state)
        MockServerAPIControl.addRoutes(to: router, state: state)
        MockNotificationControl.addRoutes(to: router, state: state)
        MockServerAPI.addNotificationRoutes(to: router, state: state)
        MockServerAPI.addAppTransactionRoutes(to: router, state: state)
        MockServerAPI.addSupportRoutes(to: router, state: state)
        router.post("/mock/secrets") { request, context -> Response in
            struct SecretBody: Decodable {
                var bundle_id: String
                var shared_secret: String?
            }
            let body = try await request.decode(as: SecretBody.self, context: context)
            state.setSharedSecret(body.shared_secret, for: body.bundle_id)
            return Response(status: .noContent)
        }
        return router
    }

    /// The mock as a Hummingbird application, for `receiptq mock-appstore`.
    public static func application(
        host: String, port: Int, state: MockAppStoreState, logger: Logger,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        Application(
            router: router(state: state), configuration: .init(address: .hostname(host, port: port)),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) }, logger: logger)
    }

    /// Starts the mock on `host:port` (port 0 = any free port) in the background.
    /// - Returns: a handle with the bound URLs; call `stop()` when done.
    public static func start(
        host: String = "127.0.0.1", port: Int = 0, state: MockAppStoreState, logger: Logger = Logger(label: "mock-appstore")
    ) async throws -> RunningMockAppStore {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = application(host: host, port: port, state: state, logger: logger) { port in
            continuation.yield(port)
            continuation.finish()
        }
        let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: logger)
        let task = Task(executorPreference: ServerThreads.shared) { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let bound = await iterator.next(), bound > 0 else {
            task.cancel()
            throw MockAppStoreError(message: "mock App Store did not start on \(host):\(port)")
        }
        return RunningMockAppStore(host: host, port: bound, state: state, group: group, task: task)
    }

    static func verifyReceipt(_ request: Request, endpoint: AppStoreEnvironment, state: MockAppStoreState) async throws -> Response {
        state.count(endpoint)
        let lifecycle = state.serverAPI.verifyReceiptLifecycle
        var response = try await validate(request, endpoint: endpoint, state: state, gone: lifecycle.gone ? lifecycle.goneStatus : nil)
        // RFC 8594 / RFC 9745: what Apple would announce before retiring the endpoint.
        if let deprecation = lifecycle.deprecation, let name = HTTPField.Name("Deprecation") { response.headers[name] = deprecation }
        if let sunset = lifecycle.sunset, let name = HTTPField.Name("Sunset") { response.headers[name] = sunset }
        return response
    }

    private static func validate(_ request: Request, endpoint: AppStoreEnvironment, state: MockAppStoreState, gone: Int?) async throws -> Response {
        if let gone { return textResponse(HTTPResponse.Status(code: gone), "Gone") }
        let body = try await request.body.collect(upTo: maxBodySize)
        guard let json = JSONValue.parseLeniently(body.readableBytesView),
            let receiptData = json["receipt-data"]?.stringValue
        else {
            return jsonResponse(["status": .number(21000)])
        }
        let receipt = try? ReceiptDecoder.decode(base64: receiptData)
        let transactionIDs = receipt?.inApp.map(\.transactionID) ?? []

        // Per request (headers) first, then per receipt (opaque value), then server-side rules.
        let rule =
            headerRule(request) ?? receipt.flatMap(receiptRule)
            ?? state.takeRule(bundleID: receipt?.bundleID, transactionIDs: transactionIDs)
        let delay = state.baseDelay + .milliseconds(rule?.delayMs ?? 0)
        if delay > .zero { try await Task.sleep(for: delay) }
        let environmentName = endpoint == .production ? "Production" : "Sandbox"
        if let rule {
            if let httpStatus = rule.httpStatus {
                return textResponse(HTTPResponse.Status(code: httpStatus), "mock App Store error \(httpStatus)")
            }
            switch rule.body {
            case "html": return textResponse(.ok, "<html><body>The service is temporarily unavailable.</body></html>")
            case "garbage": return textResponse(.ok, "\u{1}\u{2}not json{")
            case "empty": return textResponse(.ok, "")
            default: break
            }
            if let status = rule.status {
                var answer: [String: JSONValue] = ["status": .number(Double(status)), "environment": .string(environmentName)]
                if let retryable = rule.isRetryable { answer["is_retryable"] = .bool(retryable) }
                return jsonResponse(answer)
            }
        }
        guard let receipt else { return jsonResponse(["status": .number(21002)]) }

        // Apple's environment rules: the endpoint must match the receipt's environment.
        let isSandboxReceipt = receipt.environment.isSandbox
        if endpoint == .production && isSandboxReceipt { return jsonResponse(["status": .number(21007)]) }
        if endpoint == .sandbox && !isSandboxReceipt { return jsonResponse(["status": .number(21008)]) }
        if let required = state.sharedSecret(for: receipt.bundleID), json["password"]?.stringValue != required {
            return jsonResponse(["status": .number(21004), "environment": .string(environmentName)])
        }
        return jsonResponse(
            answer(
                for: receipt, receiptData: receiptData, environmentName: environmentName,
                excludeOld: json["exclude-old-transactions"]?.boolValue ?? false, state: state))
    }

    /// Apple's answer for a receipt it accepts (public for the bench's `outbox` row, which stores
    /// the same answers without the HTTP round trip).
    public static func answer(
        for receipt: AppReceipt, receiptData: String, environmentName: String, excludeOld: Bool, state: MockAppStoreState? = nil
    ) -> [String: JSONValue] {
        let now = Date()
        func date(_ key: String, _ value: Date?, into object: inout [String: JSONValue]) {
            guard let value else { return }
            object[key] = .string(AppleDateFormat.format(value))
            object["\(key)_ms"] = .string(String(Int64(value.timeIntervalSince1970 * 1000)))
        }
        if receipt.style == .transaction, let purchase = receipt.inApp.first {
            // iOS 6 shape: a flat receipt object; 21006 with latest_expired_receipt_info once expired.
            var flat = purchase.appleJSON.objectValue ?? [:]
            flat["bid"] = .string(receipt.bundleID)
            flat["bvrs"] = .string(receipt.applicationVersion ?? "1.0")
            if let expires = purchase.expiresDate {
                flat["expires_date"] = .string(String(Int64(expires.timeIntervalSince1970 * 1000)))
                if expires < now {
                    return [
                        "status": .number(21006), "environment": .string(environmentName), "receipt": .object(flat),
                        "latest_expired_receipt_info": .object(flat),
                    ]
                }
                return [
                    "status": .number(0), "environment": .string(environmentName), "receipt": .object(flat),
                    "latest_receipt_info": .object(flat), "latest_receipt": .string(receiptData),
                ]
            }
            return ["status": .number(0), "environment": .string(environmentName), "receipt": .object(flat)]
        }
        var object: [String: JSONValue] = [
            "receipt_type": .string(receipt.environment.rawValue),
            "adam_id": .number(0), "app_item_id": .number(0), "download_id": .number(0),
            "version_external_identifier": .number(0),
            "bundle_id": .string(receipt.bundleID),
            "application_version": .string(receipt.applicationVersion ?? "1.0"),
            "original_application_version": .string(receipt.originalApplicationVersion ?? "1.0"),
            "in_app": .array(receipt.inApp.map(\.appleJSON)),
        ]
        date("receipt_creation_date", receipt.creationDate, into: &object)
        date("request_date", now, into: &object)
        date("original_purchase_date", receipt.originalPurchaseDate, into: &object)
        var answer: [String: JSONValue] = [
            "status": .number(0), "environment": .string(environmentName), "receipt": .object(object),
        ]
        var subscriptions = receipt.inApp.filter { $0.expiresDate != nil }
        // Renewals Apple charged since the receipt was made: in latest_receipt_info, not in the receipt.
        for originalTransactionID in Set(subscriptions.map(\.originalTransactionID)).sorted() {
            subscriptions += state?.renewals(of: originalTransactionID) ?? []
        }
        if !subscriptions.isEmpty {
            var latest = subscriptions
            if excludeOld {
                // Only the newest transaction of each subscription, as Apple does.
                latest = Dictionary(grouping: subscriptions, by: \.originalTransactionID).values.compactMap {
                    $0.max { ($0.expiresDate ?? .distantPast) < ($1.expiresDate ?? .distantPast) }
                }
            }
            answer["latest_receipt_info"] = .array(latest.map(\.appleJSON))
            answer["latest_receipt"] = .string(receiptData)
            let newest = Dictionary(grouping: subscriptions, by: \.originalTransactionID).values.compactMap {
                $0.max { ($0.expiresDate ?? .distantPast) < ($1.expiresDate ?? .distantPast) }
            }
            answer["pending_renewal_info"] = .array(
                newest.map { purchase in
                    var entry: [String: JSONValue] = [
                        "auto_renew_product_id": .string(purchase.productID),
                        "product_id": .string(purchase.productID),
                        "original_transaction_id": .string(purchase.originalTransactionID),
                        "auto_renew_status": .string(purchase.cancellationDate == nil ? "1" : "0"),
                    ]
                    for (key, value) in state?.renewalInfo(of: purchase.originalTransactionID) ?? [:] {
                        entry[key] = value == .null ? nil : value
                    }
                    return .object(entry)
                })
        }
        return answer
    }

    static func headerRule(_ request: Request) -> MockRule? {
        func header(_ name: String) -> String? { HTTPField.Name(name).flatMap { request.headers[$0] } }
        var rule = MockRule()
        rule.status = header("X-Mock-Status").flatMap(Int.init)
        rule.delayMs = header("X-Mock-Delay-Ms").flatMap(Int.init)
        rule.httpStatus = header("X-Mock-HTTP-Status").flatMap(Int.init)
        rule.body = header("X-Mock-Body")
        return rule == MockRule() ? nil : rule
    }

    static func receiptRule(_ receipt: AppReceipt) -> MockRule? {
        guard let opaque = receipt.opaqueValue, let text = String(bytes: opaque, encoding: .utf8), text.hasPrefix("mock:")
        else { return nil }
        return MockRule(directives: String(text.dropFirst(5)))
    }

    /// The answer as JSON, written directly: through `JSONEncoder` the mock spent a fifth of its CPU
    /// encoding answers, CPU the `pipeline` row's workers and Postgres share with it on one machine.
    static func jsonResponse(_ object: [String: JSONValue]) -> Response {
        var writer = JSONWriter(capacity: 8192)
        writer.value(.object(object))
        return Response(
            status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: writer.bytes)))
    }

    static func textResponse(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(
            status: status, headers: [.contentType: "text/html; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}

/// A running in-process mock App Store.
public final class RunningMockAppStore: Sendable {
    /// The bound port.
    public let port: Int
    /// `http://host:port`.
    public let baseURL: String
    /// The scripted state (rules, secrets, counters).
    public let state: MockAppStoreState
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    init(host: String, port: Int, state: MockAppStoreState, group: ServiceGroup, task: Task<Void, any Error>) {
        self.port = port
        self.baseURL = "http://\(host):\(port)"
        self.state = state
        self.group = group
        self.task = task
    }

    /// The production endpoint URL.
    public var productionURL: String { "\(baseURL)/verifyReceipt" }
    /// The sandbox endpoint URL.
    public var sandboxURL: String { "\(baseURL)/sandbox/verifyReceipt" }
    /// The App Store Server API's production base URL (`/inApps/...` follows).
    public var serverAPIProductionURL: String { "\(baseURL)/storekit/production" }
    /// The App Store Server API's sandbox base URL.
    public var serverAPISandboxURL: String { "\(baseURL)/storekit/sandbox" }

    /// The settings that point receiptq at this mock (`APPSTORE_*` URLs, production and sandbox,
    /// verifyReceipt and the Server API): what an in-process system is started with.
    public var settings: [String: String] {
        [
            "APPSTORE_PRODUCTION_URL": productionURL, "APPSTORE_SANDBOX_URL": sandboxURL,
            "APPSTORE_SERVER_API_PRODUCTION_URL": serverAPIProductionURL, "APPSTORE_SERVER_API_SANDBOX_URL": serverAPISandboxURL,
        ]
    }

    /// Stops the server and waits for it.
    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}

/// The mock could not start.
public struct MockAppStoreError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { "MockAppStoreError: \(message)" }
}
