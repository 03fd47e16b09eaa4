import Curl
import Foundation
import Metrics
import ReceiptCore
import ServiceLifecycle

/// The App Store Server API's support endpoints with an app's key: Look Up Order ID, Get Refund
/// History (v2, every page), Extend a Subscription Renewal Date (one, or every active subscriber
/// of a product, with its status), Set App Account Token, Request a Test Notification and its
/// status.
///
/// **Limits.** Each call first takes a slot from the shared ``ServerAPIThrottle`` bucket of its
/// endpoint (Apple's per-app limits: 20/s extend and account token, 10/s look-up and refunds, 1/s
/// mass extension and test notifications; a tenth in the sandbox). A slot booked within
/// ``maximumWait`` is waited for; a later one, or Apple's `429`, ends the call with
/// ``SupportFailure/rateLimited(until:)`` (and a `429` pauses every call of the app, as a
/// worker's does).
///
/// **Trust.** Every JWS Apple returns is checked with `verifyPayload` (Apple's chain, the app's
/// bundle id) before anything is done with it.
///
/// **Accounting.** Each call takes its slot and is counted (``AppleCallMeter``) with the purpose
/// `support` (`refund_defence` for Send Consumption Information), which may spend an app's whole
/// hourly budget, as a customer's purchase may.
///
/// Few calls, made by people: the async client, no thread of its own. A `Service` only to close
/// its kept-alive connections at shutdown.
public final class ServerSupportClient: Service, Sendable {
    private let configuration: ServerAPIClient.Configuration
    private let client: HTTPClient
    private let tokens: ServerAPITokenIssuer
    private let verifyPayload: ServerAPIClient.PayloadVerifier
    private let throttle: ServerAPIThrottle?
    private let meter: AppleCallMeter
    private let now: @Sendable () -> Date
    /// The longest a call waits for its booked slot before it answers "rate limited" instead.
    public let maximumWait: TimeInterval

    /// Creates the client.
    /// - Parameters:
    ///   - verifyPayload: checks each JWS of Apple's answers (the workers' verifier).
    ///   - throttle: the deployment-wide buckets (nil: only Apple's `429` limits the calls).
    ///   - maximumWait: how long a call may wait for its slot (the admin API: 2 s; the CLI longer).
    ///   - meter: counts every call sent, by app, endpoint and purpose (`support`).
    public init(
        configuration: ServerAPIClient.Configuration, verifyPayload: @escaping ServerAPIClient.PayloadVerifier, throttle: ServerAPIThrottle?,
        maximumWait: TimeInterval, meter: AppleCallMeter = AppleCallMeter(factory: MetricsSystem.factory),
        tokens: ServerAPITokenIssuer = ServerAPITokenIssuer(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        self.configuration = configuration
        self.client = try HTTPClient(options: configuration.curlOptions, lanes: 2)
        self.tokens = tokens
        self.verifyPayload = verifyPayload
        self.throttle = throttle
        self.maximumWait = max(0, maximumWait)
        self.meter = meter
        self.now = now
    }

    /// Waits for graceful shutdown or cancellation, then closes the connections.
    public func run() async throws { try await client.run() }

    // MARK: Look-ups

    /// Look Up Order ID (`GET /inApps/v1/lookup/{orderId}`): the order's transactions, checked.
    /// - Throws: ``SupportFailure`` (`orderNotFound` for Apple's `status` 1).
    public func lookUpOrder(_ orderID: String, app: AppRecord, environment: AppStoreEnvironment) async throws(SupportFailure) -> [SupportTransaction]
    {
        // Order ids are letters and digits (`MK5TTTVWJH`); anything else would be spliced into the path.
        guard !orderID.isEmpty, orderID.count <= 64,
            orderID.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0)) })
        else { throw .orderNotFound }
        let answer = try await call(
            "GET", "/inApps/v1/lookup/\(orderID)", endpoint: .lookUpOrderID, app: app, environment: environment, notFound: .orderNotFound)
        guard answer["status"]?.intValue == 0 else { throw .orderNotFound }
        return try transactions(answer["signedTransactions"], app: app)
    }

    /// Get Refund History (`GET /inApps/v2/refund/lookup/{transactionId}`), following `revision`
    /// while `hasMore` (at most `maxPages` pages).
    public func refundHistory(
        of transactionID: String, app: AppRecord, environment: AppStoreEnvironment, maxPages: Int = 50
    ) async throws(SupportFailure) -> [SupportTransaction] {
        var refunded: [SupportTransaction] = []
        var revision: String?
        for _ in 0..<max(1, maxPages) {
            var path = "/inApps/v2/refund/lookup/\(transactionID)"
            if let revision { path += "?revision=\(revision.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }
            let answer = try await call("GET", path, endpoint: .refundHistory, app: app, environment: environment)
            refunded += try transactions(answer["signedTransactions"], app: app)
            guard answer["hasMore"]?.boolValue == true, let next = answer["revision"]?.stringValue, !next.isEmpty, next != revision else { break }
            revision = next
        }
        return refunded
    }

    // MARK: Changes

    /// Extend a Subscription Renewal Date (`PUT /inApps/v1/subscriptions/extend/{originalTransactionId}`).
    public func extendRenewal(
        _ request: RenewalExtension, app: AppRecord, environment: AppStoreEnvironment
    ) async throws(SupportFailure) -> RenewalExtensionResult {
        let body = JSONValue.object([
            "extendByDays": .number(Double(request.days)), "extendReasonCode": .number(Double(request.reason.rawValue)),
            "requestIdentifier": .string(request.requestIdentifier.uuidString.lowercased()),
        ])
        let answer = try await call(
            "PUT", "/inApps/v1/subscriptions/extend/\(request.originalTransactionID)", endpoint: .extendRenewalDate, app: app,
            environment: environment, body: body)
        return RenewalExtensionResult(
            originalTransactionID: answer["originalTransactionId"]?.stringValue ?? request.originalTransactionID,
            succeeded: answer["success"]?.boolValue ?? false, effectiveDate: Self.date(answer["effectiveDate"]),
            webOrderLineItemID: answer["webOrderLineItemId"]?.stringValue)
    }

    /// Extend Subscription Renewal Dates for All Active Subscribers (`POST /inApps/v1/subscriptions/extend/mass`).
    public func massExtend(_ request: MassRenewalExtension, app: AppRecord, environment: AppStoreEnvironment) async throws(SupportFailure) {
        var body: [String: JSONValue] = [
            "extendByDays": .number(Double(request.days)), "extendReasonCode": .number(Double(request.reason.rawValue)),
            "requestIdentifier": .string(request.requestIdentifier.uuidString.lowercased()), "productId": .string(request.productID),
        ]
        if !request.storefrontCountryCodes.isEmpty { body["storefrontCountryCodes"] = .array(request.storefrontCountryCodes.map(JSONValue.string)) }
        _ = try await call(
            "POST", "/inApps/v1/subscriptions/extend/mass", endpoint: .massExtendRenewalDate, app: app, environment: environment, body: .object(body))
    }

    /// Get Status of Subscription Renewal Date Extensions (`GET …/extend/mass/{productId}/{requestIdentifier}`).
    public func massExtensionStatus(
        productID: String, requestIdentifier: UUID, app: AppRecord, environment: AppStoreEnvironment
    ) async throws(SupportFailure) -> MassExtensionProgress {
        let product = productID.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union([".", "-", "_"])) ?? ""
        let answer = try await call(
            "GET", "/inApps/v1/subscriptions/extend/mass/\(product)/\(requestIdentifier.uuidString.lowercased())", endpoint: .massExtensionStatus,
            app: app, environment: environment)
        return MassExtensionProgress(
            isComplete: answer["complete"]?.boolValue ?? false, completedAt: Self.date(answer["completeDate"]),
            succeededCount: answer["succeededCount"]?.intValue, failedCount: answer["failedCount"]?.intValue)
    }

    /// Set App Account Token (`PUT /inApps/v1/transactions/{originalTransactionId}/appAccountToken`).
    public func setAppAccountToken(
        _ token: UUID, originalTransactionID: String, app: AppRecord, environment: AppStoreEnvironment
    ) async throws(SupportFailure) {
        _ = try await call(
            "PUT", "/inApps/v1/transactions/\(originalTransactionID)/appAccountToken", endpoint: .setAppAccountToken, app: app,
            environment: environment, body: .object(["appAccountToken": .string(token.uuidString.lowercased())]), emptyAnswer: true)
    }

    // MARK: Test notifications

    /// Request a Test Notification: Apple's `testNotificationToken`.
    public func requestTestNotification(app: AppRecord, environment: AppStoreEnvironment) async throws(SupportFailure) -> String {
        let answer = try await call(
            "POST", "/inApps/v1/notifications/test", endpoint: .testNotification, app: app, environment: environment, body: .object([:]))
        guard let token = answer["testNotificationToken"]?.stringValue, !token.isEmpty else { throw .malformedAnswer }
        return token
    }

    /// Get Test Notification Status; the notification's UUID is read from its payload once that checks.
    public func testNotificationStatus(
        token: String, app: AppRecord, environment: AppStoreEnvironment
    ) async throws(SupportFailure) -> TestNotificationStatus {
        // Apple's tokens are a UUID and a timestamp joined by `_`; nothing else goes into the path.
        guard !token.isEmpty, token.count <= 128,
            token.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_") })
        else { throw .testNotificationNotFound }
        let answer = try await call(
            "GET", "/inApps/v1/notifications/test/\(token)", endpoint: .testNotificationStatus, app: app, environment: environment,
            notFound: .testNotificationNotFound)
        let attempts = (answer["sendAttempts"]?.arrayValue ?? []).compactMap { item -> TestNotificationStatus.Attempt? in
            guard let date = Self.date(item["attemptDate"]), let result = item["sendAttemptResult"]?.stringValue else { return nil }
            return TestNotificationStatus.Attempt(date: date, result: result)
        }
        var uuid: String?
        if let signed = answer["signedPayload"]?.stringValue {
            guard case .success(let payload) = verifyPayload(signed) else { throw .malformedAnswer }
            uuid = payload["notificationUUID"]?.stringValue
        }
        return TestNotificationStatus(notificationUUID: uuid, attempts: attempts)
    }

    // MARK: Calls

    /// The signed transactions of an answer, each checked (signature, documented fields, bundle).
    private func transactions(_ list: JSONValue?, app: AppRecord) throws(SupportFailure) -> [SupportTransaction] {
        var found: [SupportTransaction] = []
        for item in list?.arrayValue ?? [] {
            guard let jws = item.stringValue, case .success(let payload) = verifyPayload(jws), (try? JWSTransactionPayload(json: payload)) != nil,
                payload["bundleId"]?.stringValue.map(app.owns(bundleID:)) ?? false,
                let transaction = SupportTransaction(payload: payload, signed: jws)
            else { throw .malformedAnswer }
            found.append(transaction)
        }
        return found
    }

    /// One call once the bucket allows it: the JSON answer, or the failure.
    private func call(
        _ method: String, _ path: String, endpoint: ServerAPIEndpoint, app: AppRecord, environment: AppStoreEnvironment, body: JSONValue? = nil,
        notFound: SupportFailure = .transactionNotFound, emptyAnswer: Bool = false
    ) async throws(SupportFailure) -> JSONValue {
        let response = try await exchange(method, path, endpoint: endpoint, app: app, environment: environment, body: body, purpose: .support)
        let json = JSONValue.parseAnswer(response.body)
        switch response.status {
        case 200..<300:
            if emptyAnswer { return json ?? .object([:]) }
            guard let json, json.objectValue != nil else { throw .malformedAnswer }
            return json
        case 429:
            throw .rateLimited(until: pause(app: app, environment: environment, response))
        default:
            throw SupportFailure.classify(status: response.status, appleCode: json?["errorCode"]?.intValue, notFound: notFound)
        }
    }

    /// Apple's `429`: every call of the app waits until its `Retry-After`, returned.
    private func pause(app: AppRecord, environment: AppStoreEnvironment, _ response: Curl.HTTPResponse) -> Date {
        let until = ServerAPIOutcome.retryAt(response.header("Retry-After"), now: now())
        throttle?.pause(app: app.bundleID, environment: environment, until: until, now: now())
        return until
    }

    /// One request with the app's key once the bucket allows it, counted for `purpose`: Apple's
    /// answer whatever its status.
    /// - Throws: `noServerAPIKey`, `rateLimited` (no slot in time), `appleUnavailable` (no answer).
    private func exchange(
        _ method: String, _ path: String, endpoint: ServerAPIEndpoint, app: AppRecord, environment: AppStoreEnvironment, body: JSONValue?,
        purpose: ApplePurpose
    ) async throws(SupportFailure) -> Curl.HTTPResponse {
        guard let key = app.serverAPIKey else { throw .noServerAPIKey }
        let token: String
        do {
            token = try tokens.token(for: key, bundleID: app.bundleID)
        } catch {
            throw .noServerAPIKey
        }
        try await waitForSlot(app: app.bundleID, endpoint: endpoint, environment: environment, purpose: purpose)
        let base = environment == .production ? configuration.productionURL : configuration.sandboxURL
        var headers: [(name: String, value: String)] = [("Authorization", "Bearer \(token)"), ("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        meter.sent(app: app.bundleID, endpoint: endpoint, purpose: purpose, environment: environment)
        do {
            return try await client.send(
                Curl.HTTPRequest(method: method, url: base + path, headers: headers, body: body.map { Array($0.encodedText.utf8) } ?? []))
        } catch {
            throw .appleUnavailable
        }
    }

    private func waitForSlot(
        app: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, purpose: ApplePurpose
    ) async throws(SupportFailure) {
        guard let throttle else { return }
        let at = now()
        let slot = await throttle.reserve(
            app: app, endpoint: endpoint, environment: environment, purpose: purpose, now: at, bookingAhead: maximumWait)
        switch slot {
        case .now: return
        case .booked(let when):
            // The slot is this call's: go at its time without asking again.
            try? await Task.sleep(for: .milliseconds(max(0, Int(when.timeIntervalSince(at) * 1000))))
        case .later(let until):
            throw .rateLimited(until: until)
        }
    }

    // MARK: Refund defence

    /// Send Consumption Information v2 (`PUT /inApps/v2/transactions/consumption/{transactionId}`),
    /// counted for the purpose `refund_defence`: Apple's word as the worker's planner reads it.
    public func sendConsumption(
        _ body: ConsumptionInformation, transactionID: String, app: AppRecord, environment: AppStoreEnvironment
    ) async -> ConsumptionReport {
        // Transaction ids are digits; anything else would be spliced into the path.
        guard !transactionID.isEmpty, transactionID.count <= 64, transactionID.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            return .refused(.invalidTransactionID)
        }
        let response: Curl.HTTPResponse
        do {
            response = try await exchange(
                "PUT", "/inApps/v2/transactions/consumption/\(transactionID)", endpoint: .sendConsumptionInformation, app: app,
                environment: environment, body: body.json, purpose: .refundDefence)
        } catch {
            switch error {
            case .rateLimited(let until): return .rateLimited(until: until)
            case .noServerAPIKey: return .refused(.serverAPIKeyMissing)
            default: return .transient(.transport(.other))
            }
        }
        switch response.status {
        case 200..<300: return .accepted
        case 429: return .rateLimited(until: pause(app: app, environment: environment, response))
        case 401: return .refused(.serverAPIUnauthorized)
        case 500..<600: return .transient(.http(response.status))
        default: return .refused(.http(response.status))
        }
    }

    /// Apple's dates are UNIX milliseconds (a number or a numeric string).
    static func date(_ value: JSONValue?) -> Date? {
        value?.stringValue.flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) }
    }
}

extension ServerSupportClient: ConsumptionSender {
    public func send(
        _ body: ConsumptionInformation, transactionID: String, app: AppRecord, environment: AppStoreEnvironment,
        completion: @escaping @Sendable (ConsumptionReport) -> Void
    ) {
        Task { completion(await sendConsumption(body, transactionID: transactionID, app: app, environment: environment)) }
    }
}
