import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import ReceiptCore

/// The client API: `POST /client/itunes_connect/receipts`, `GET /client/itunes_connect/receipts/{id}`,
/// the entitlement API (`GET /client/subscriptions`), and the health probes.
///
/// A 2xx means the receipt is durably in Redis (or already in Postgres): when Redis cannot take the
/// job the answer is 503 with `Retry-After`, never a 2xx.
public struct IngestAPI: Sendable {
    /// API settings.
    public struct Configuration: Sendable {
        /// How long a POST waits for the worker before answering 206 (default 2 s).
        public var syncWait: Duration
        /// The largest body accepted (413 beyond; default 1 MiB).
        public var maxBodyBytes: Int
        /// The reverse proxies whose forwarding header (e.g. `X-Forwarded-For`) names the client;
        /// without a header, the peer address is the client.
        public var proxies: TrustedProxies

        /// Creates a configuration with production defaults.
        public init(syncWait: Duration = .seconds(2), maxBodyBytes: Int = 1 << 20, proxies: TrustedProxies = TrustedProxies(header: nil)) {
            self.syncWait = syncWait
            self.maxBodyBytes = maxBodyBytes
            self.proxies = proxies
        }
    }

    let intake: any ReceiptIntake
    let catalog: any ReceiptCatalog
    /// The entitlement API's read side; nil leaves `/client/subscriptions` out.
    let subscriptions: (any SubscriptionCatalog)?
    /// The events API's read side; nil leaves `/client/events` out.
    let events: (any EventCatalog)?
    /// The app transaction API's store; nil leaves `/client/app-transactions` out.
    let appTransactions: (any AppTransactionCatalog)?
    /// The customer API's read side; nil leaves `/client/customers/{user}` out.
    let customers: (any CustomerCatalog)?
    /// The identity API's store; nil leaves `/client/users/{user}/…` out.
    let identity: (any CustomerIdentity)?
    let consumption: (any CustomerConsumptionLog)?
    let configuration: Configuration
    /// The rules shared with the Cloud Softphone web service.
    public let ingestion: ReceiptIngestion
    let now: @Sendable () -> Date
    /// What the notification endpoint answered, and what became of batch items.
    let metrics: IngestMetrics
    /// The throttle and security log of the doors.
    let gate: AuthGate
    /// `/health/ready`'s cached check of Redis and Postgres.
    let readiness: Readiness

    /// Creates the API.
    /// - Parameters:
    ///   - intake: Redis, where receipts are queued.
    ///   - catalog: Postgres, for tokens and stored receipts.
    ///   - authenticity: the local signature check (402 when it fails).
    ///   - signedPayloads: the JWS check of StoreKit 2 signed transactions (402 when it fails).
    ///   - subscriptions: Postgres, for the entitlement API (nil: no `/client/subscriptions`).
    ///   - events: Postgres, for the events API (nil: no `/client/events`).
    ///   - appTransactions: Postgres, for the app transaction API (nil: no `/client/app-transactions`).
    ///   - customers: Postgres, for the customer API (nil: no `/client/customers/{user}`).
    ///   - identity: Postgres, for app account tokens and aliases (nil: no `/client/users/{user}/…`).
    ///   - consumption: Postgres, for the refund defence's door (nil: no `/client/users/{user}/consumption`).
    ///   - gate: the doors' failure throttle and security log.
    ///   - configuration: settings.
    ///   - metrics: the process's metrics backend (default: the bootstrapped one).
    ///   - now: the injected clock.
    public init(
        intake: any ReceiptIntake, catalog: any ReceiptCatalog, authenticity: any ReceiptAuthenticity,
        signedPayloads: (any SignedPayloadVerifier)? = nil, subscriptions: (any SubscriptionCatalog)? = nil,
        events: (any EventCatalog)? = nil, appTransactions: (any AppTransactionCatalog)? = nil, customers: (any CustomerCatalog)? = nil,
        identity: (any CustomerIdentity)? = nil, consumption: (any CustomerConsumptionLog)? = nil, gate: AuthGate,
        configuration: Configuration = Configuration(),
        metrics: any MetricsFactory = MetricsSystem.factory, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.metrics = IngestMetrics(factory: metrics)
        self.gate = gate
        self.intake = intake
        self.catalog = catalog
        self.subscriptions = subscriptions
        self.events = events
        self.appTransactions = appTransactions
        self.customers = customers
        self.identity = identity
        self.consumption = consumption
        self.now = now
        self.configuration = configuration
        self.readiness = Readiness(intake: intake, catalog: catalog)
        self.ingestion = ReceiptIngestion(
            intake: intake, catalog: catalog, authenticity: authenticity, signedPayloads: signedPayloads, syncWait: configuration.syncWait,
            now: now)
    }

    /// The query parameters each route of this API takes (for ``InputHygieneMiddleware``); the
    /// OpenAPI document declares the same.
    public static let queryParameters: [String: Set<String>] = [
        "POST /client/itunes_connect/receipts": [], "POST /client/itunes_connect/receipts/batch": [], "GET /client/itunes_connect/receipts/{id}": [],
        "POST /client/transactions": [], "POST /client/transactions/batch": [],
        "GET /client/subscriptions": ["user_identifier"], "GET /client/subscriptions/{original_transaction_id}": ["environment"],
        "GET /client/events": ["after", "limit", "type", "user_identifier"],
        "POST /client/app-transactions": [], "GET /client/app-transactions": ["user_identifier"],
        "GET /client/customers/{user_identifier}": [], "PUT /client/users/{user_identifier}/consumption": [],
        "PUT /client/users/{user_identifier}/app-account-token": [], "POST /client/users/{user_identifier}/aliases": [],
        "GET /health/live": [], "GET /health/ready": [], "GET /openapi.yaml": [], "POST /apple/notifications/{app}/{token}": [],
    ]

    /// Adds the API's routes to `router`.
    public func addRoutes(to router: Router<IngestRequestContext>) {
        router.post("/client/itunes_connect/receipts") { request, context in
            try await submit(request, context: context)
        }
        router.post(RouterPath(Self.batchPath)) { request, context in
            try await submitBatch(request, context: context, kind: .receipts)
        }
        router.get("/client/itunes_connect/receipts/{id}") { request, context in
            try await show(request, context: context)
        }
        router.post("/client/transactions") { request, context in
            try await submitTransaction(request, context: context)
        }
        router.post(RouterPath(Self.transactionsBatchPath)) { request, context in
            try await submitBatch(request, context: context, kind: .transactions)
        }
        router.post("/apple/notifications/{app}/{token}") { request, context in
            try await receiveNotification(request, context: context)
        }
        if let subscriptions { addSubscriptionRoutes(to: router, catalog: subscriptions) }
        if let events { addEventRoutes(to: router, catalog: events) }
        if let appTransactions { addAppTransactionRoutes(to: router, store: appTransactions) }
        if let customers { addCustomerRoutes(to: router, catalog: customers) }
        if let identity { addIdentityRoutes(to: router, identity: identity) }
        if let consumption { addConsumptionRoutes(to: router, log: consumption) }
        router.get("/health/live") { _, _ in
            json(.ok, ["status": .string("ok")])
        }
        router.get("/health/ready") { _, _ in
            let report = await readiness.report()
            return json(report.isReady ? .ok : .serviceUnavailable, ["status": .string(report.status)])
        }
        OpenAPIDocument.addRoute(to: router)
    }

    /// What every JSON submission starts with: the token's app and the parsed body, or the answer
    /// refusing the request (401/503, 415, 413, 422).
    func jsonSubmission(_ request: Request, context: IngestRequestContext) async throws -> Result<(AppRecord, JSONValue), Refusal> {
        let app: AppRecord
        switch await authorize(request, context: context) {
        case .success(let found): app = found
        case .failure(let refusal): return .failure(refusal)
        }
        guard let contentType = request.headers[.contentType], contentType.lowercased().hasPrefix("application/json") else {
            return .failure(Refusal(response: json(.unsupportedMediaType, ["error": .string("Content-Type must be application/json")])))
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: configuration.maxBodyBytes)
        } catch is NIOTooManyBytesError {
            return .failure(
                Refusal(response: json(.contentTooLarge, ["error": .string("body larger than \(configuration.maxBodyBytes) bytes")])))
        }
        guard let parsed = Self.parseJSONBody(body) else {
            return .failure(Refusal(response: refused([FieldError(field: "body", reason: "must be valid JSON")], app: app, logger: context.logger)))
        }
        return .success((app, parsed))
    }

    /// A JSON request body, read in one pass over its bytes (``JSONValue/parse(_:)``); a text that
    /// reader is stricter about than `JSONDecoder` (a duplicate key, a lone surrogate escape) is
    /// still read as `JSONDecoder` reads it, as the API always did. Nil: not JSON.
    public static func parseJSONBody(_ body: ByteBuffer) -> JSONValue? {
        body.withUnsafeReadableBytes { JSONValue.parseLeniently($0) }
    }

    func submit(_ request: Request, context: IngestRequestContext) async throws -> Response {
        let (app, parsed): (AppRecord, JSONValue)
        switch try await jsonSubmission(request, context: context) {
        case .success(let found): (app, parsed) = found
        case .failure(let refusal): return refusal.response
        }
        let submit: SubmitReceiptRequest
        switch SubmitReceiptRequest.parse(parsed) {
        case .success(let value): submit = value
        case .failure(let failure): return refused(failure.errors, app: app, logger: context.logger)
        }
        var submission = submit.submission
        if submit.ipAddressOmitted { submission.ipAddress = clientAddress(request, context: context) }
        let outcome = await ingestion.ingest(submit.receipt, submission: submission, app: app, origin: .api, logger: context.logger)
        return answer(outcome, app: app, context: context)
    }

    /// The answer to a submission: 200 validated, 206 queued, 402 fraud (each with the resource),
    /// 503 when Redis did not take it.
    func answer(_ outcome: ReceiptIngestion.Outcome, app: AppRecord, context: IngestRequestContext) -> Response {
        let (status, resource): (HTTPResponse.Status, ReceiptResource?) =
            switch outcome {
            case .validated(let resource): (.ok, resource)
            case .queued(let resource): (.partialContent, resource)
            case .fraud(let resource): (.paymentRequired, resource)
            case .unavailable: (.serviceUnavailable, nil)
            }
        context.logger.debug(
            "Receipt submitted",
            metadata: [
                "app.id": "\(app.id.uuidString.lowercased())", "receipt.id": "\(resource?.id.uuidString.lowercased() ?? "-")",
                "http.status": "\(status.code)",
            ])
        return resource.map { resourceResponse(status, $0, app: app) } ?? unavailable()
    }

    /// 422, logged with the names of the refused fields (never their values).
    func refused(_ errors: [FieldError], app: AppRecord, logger: Logger) -> Response {
        logger.debug(
            "Receipt request refused",
            metadata: ["app.id": "\(app.id.uuidString.lowercased())", "request.fields": .array(errors.map { .string($0.field) })])
        return unprocessable(errors)
    }

    func show(_ request: Request, context: IngestRequestContext) async throws -> Response {
        let app: AppRecord
        switch await authorize(request, context: context) {
        case .success(let found): app = found
        case .failure(let refusal): return refusal.response
        }
        guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)) else { return notFound() }
        do {
            if let stored = try await catalog.receipt(id: id, appID: app.id) { return resourceResponse(.ok, stored, app: app) }
            if let pending = try await intake.pendingResource(id: id), pending.appFamilyID == app.id {
                return resourceResponse(.ok, pending, app: app)
            }
        } catch {
            return lookupFailed(error, field: nil, logger: context.logger)
        }
        return notFound()
    }

    /// The app of the request's Bearer token, or the answer refusing the request: 401 for a bad
    /// token, 429 once the client's address has failed too often (``AuthGate``), 503 when the token
    /// store is unreachable.
    func authorize(_ request: Request, context: IngestRequestContext) async -> Result<AppRecord, Refusal> {
        func attempt() -> AuthAttempt { AuthAttempt(door: .clientToken, address: clientAddress(request, context: context)) }
        // A closed address costs no look-up: a flood of wrong tokens must not reach Postgres. (The
        // attempt is built only when some address is closed, or the token is wrong: a right token
        // from a clean process costs one atomic load.)
        if gate.knowsClosedAddresses, let seconds = gate.isKnownClosed(attempt(), now: now()) {
            return .failure(Refusal(response: tooManyFailures(seconds)))
        }
        switch await authenticate(request, context: context) {
        case .success(.app(let found)):
            // A right token costs the throttle nothing, and is not logged: it is every request.
            return .success(found)
        case .success(.none):
            return .failure(Refusal(response: unauthorized()))
        case .success(.wrong(let reason)):
            // Never the token, nor whether it exists: only that the request was turned away.
            if case .closed(let seconds) = await gate.refused(attempt(), reason, now: now()) {
                return .failure(Refusal(response: tooManyFailures(seconds)))
            }
            return .failure(Refusal(response: unauthorized()))
        case .failure:
            return .failure(Refusal(response: unavailable()))
        }
    }

    /// What a request's Bearer token came to.
    enum TokenCheck {
        case app(AppRecord)
        /// No Bearer token at all: no guess, so neither logged nor throttled.
        case none
        case wrong(AuthRefusal)
    }

    /// The app of the request's Bearer token; a failure means the token store is unreachable (503),
    /// which must not be confused with a bad token (401).
    func authenticate(_ request: Request, context: IngestRequestContext) async -> Result<TokenCheck, any Error> {
        // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
        guard let header = request.headers[.authorization] else { return .success(.none) }
        guard header.prefix(7).lowercased() == "bearer " else { return .success(.wrong(.malformed)) }
        let token = HTTPText.trimmed(header.dropFirst(7))
        guard !token.isEmpty, token.count <= 200 else { return .success(.wrong(.malformed)) }
        do {
            return .success(try await catalog.authenticate(token: token).map(TokenCheck.app) ?? .wrong(.unknownCredential))
        } catch let failure as StoreFailure where failure.isPermanent {
            return .success(.wrong(.unknownCredential))  // a value the store cannot hold is nobody's token: 401
        } catch {
            context.logger.error("Token lookup failed", error: error)
            return .failure(error)
        }
    }

    /// The client's address: the peer, or the address a trusted proxy says it forwarded.
    func clientAddress(_ request: Request, context: IngestRequestContext) -> String? {
        let proxies = configuration.proxies
        let forwarded = proxies.header.flatMap { HTTPField.Name($0) }.map { request.headers[values: $0].joined(separator: ",") }
        return proxies.client(peer: context.remoteAddress?.ipAddress, forwarded: forwarded)
    }
}

/// 429 with `Retry-After`: too many failed authentications from this address (or against this
/// account); nothing was checked.
func tooManyFailures(_ seconds: Int) -> Response {
    var response = json(.tooManyRequests, ["error": .string("too many failed authentications, retry later")])
    response.headers[.retryAfter] = String(seconds)
    return response
}

func json(_ status: HTTPResponse.Status, _ object: [String: JSONValue]) -> Response {
    let data = (try? JSONEncoder().encode(JSONValue.object(object))) ?? Data()
    return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
}

func resourceResponse(_ status: HTTPResponse.Status, _ resource: ReceiptResource, app: AppRecord) -> Response {
    jsonBytes(status, resource.encoded(sandboxPolicy: app.sandboxPolicy))
}

func jsonBytes(_ status: HTTPResponse.Status, _ bytes: [UInt8]) -> Response {
    Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
}

/// A request turned away before its handler ran (an `Error` only so that it fits `Result`).
struct Refusal: Error {
    var response: Response
}

func unprocessable(_ errors: [FieldError]) -> Response {
    let data = (try? JSONEncoder().encode(["errors": errors])) ?? Data()
    return Response(
        status: .unprocessableContent, headers: [.contentType: "application/json"],
        body: .init(byteBuffer: ByteBuffer(bytes: data)))
}

/// 401 without detail: nothing tells a caller whether the token exists, was revoked, or was malformed.
func unauthorized() -> Response {
    var response = json(.unauthorized, ["error": .string("unauthorized")])
    response.headers[.wwwAuthenticate] = "Bearer"
    return response
}

/// 503 with `Retry-After`: the client may send the same receipt again later.
func unavailable() -> Response {
    var response = json(.serviceUnavailable, ["error": .string("temporarily unavailable, retry later")])
    response.headers[.retryAfter] = "5"
    return response
}

func notFound() -> Response { json(.notFound, ["error": .string("not found")]) }

/// The answer to a lookup that threw: a value the store refuses can match nothing, so it is the
/// client's mistake (422 naming `field`, or 404 for a path parameter: `field` nil); anything else
/// is the store being unreachable (503, retry later).
func lookupFailed(_ error: any Error, field: String?, logger: Logger) -> Response {
    if let failure = error as? StoreFailure, failure.isPermanent {
        logger.debug("Lookup refused by the store", metadata: ["error.code": "\(failure.code)"])
        guard let field else { return notFound() }
        return unprocessable([FieldError(field: field, reason: "cannot be looked up: \(failure.message)")])
    }
    logger.error("Lookup failed: store unavailable", error: error)
    return unavailable()
}

extension HTTPResponse.Status {
    /// 402: the receipt is not signed by Apple or not this app's (possible fraud), as in the client API.
    static let paymentRequired = HTTPResponse.Status(code: 402, reasonPhrase: "Payment Required")
}
