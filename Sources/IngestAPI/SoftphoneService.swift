import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import OpenSSL
import ReceiptCore

/// The Cloud Softphone "iOS in-app purchase" provider web service: `GET` or `POST /cloudsoftphone/iap`.
///
/// The softphone sends the receipt of a purchase it just made (`receipt`, `productCode`, `price`,
/// `currency` and any account variables, in a query string, a form body or a JSON body) and shows
/// the answer's `message` to its user. Every answer carries `final=1`, so the softphone finishes
/// the purchase flow whatever happened; 2xx means the purchase may be delivered (200: Apple said
/// valid; 202: durably queued, Apple has not answered yet), anything else that it may not.
///
/// The receipt goes through the same ``ReceiptIngestion`` rules as the client API (origin
/// `softphone`). Authentication is per app: HTTP Digest or Basic with the app's softphone
/// credentials, or one of the app's API tokens in a `token` parameter.
public struct SoftphoneService: Sendable {
    /// Web service settings.
    public struct Configuration: Sendable {
        /// The key of Digest nonces; nil for a random one per process. Replicas behind one load
        /// balancer need the same key, or a nonce issued by one is stale at another.
        public var nonceSecret: [UInt8]?
        /// How long a Digest nonce stays fresh (default 5 minutes).
        public var nonceLifetime: Duration

        /// Creates a configuration.
        public init(nonceSecret: [UInt8]? = nil, nonceLifetime: Duration = .seconds(300)) {
            self.nonceSecret = nonceSecret
            self.nonceLifetime = nonceLifetime
        }
    }

    /// The path the softphone's `iapWsUrl` points at.
    public static let path = "/cloudsoftphone/iap"

    let api: IngestAPI
    let nonces: DigestNonces
    let replayGuard = DigestReplayGuard()

    /// Creates the service on the client API's rules, catalog and settings (body size, proxy header).
    public init(api: IngestAPI, configuration: Configuration = Configuration()) {
        self.api = api
        self.nonces = DigestNonces(secret: configuration.nonceSecret ?? SecureRandom.bytes(32), lifetime: configuration.nonceLifetime)
    }

    /// Adds `GET` and `POST` ``path`` to `router`.
    public func addRoutes(to router: Router<IngestRequestContext>) {
        router.get(RouterPath(stringLiteral: Self.path)) { request, context in await handle(request, context: context) }
        router.post(RouterPath(stringLiteral: Self.path)) { request, context in await handle(request, context: context) }
    }

    /// Answers one request. Never throws: whatever happens, the softphone gets `final=1`.
    func handle(_ request: Request, context: IngestRequestContext) async -> Response {
        let mediaType = request.headers[.contentType].flatMap(BodyKind.mediaType)
        let isPOST = request.method == .post
        let isJSON = isPOST && mediaType == "application/json"
        let format = SoftphoneFormat.negotiate(
            accept: request.headers[values: .accept].joined(separator: ","), requestWasJSON: isJSON)
        let limit = api.configuration.maxBodyBytes

        let query = request.uri.query ?? ""
        guard query.utf8.count <= limit else { return Self.respond(Self.tooLarge(limit), format) }
        let queryParameters = SoftphoneForm.parse(query.utf8)
        var bodyParameters: Result<[SoftphoneParameter], SoftphoneRequestError> = .success([])
        if isPOST {
            // No Content-Type is taken for the softphone's own default, a form.
            guard mediaType == nil || mediaType == "application/x-www-form-urlencoded" || isJSON else {
                return Self.respond(Self.unsupportedMediaType, format)
            }
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: limit)
            } catch is NIOTooManyBytesError {
                return Self.respond(Self.tooLarge(limit), format)
            } catch {
                return Self.respond(SoftphoneReply(status: 400, message: "The request body could not be read."), format)
            }
            let bytes = Array(body.readableBytesView)
            bodyParameters = isJSON ? SoftphoneJSON.parse(bytes) : SoftphoneForm.parse(bytes)
        }

        // Authentication before validation: a caller without credentials learns nothing about the
        // receipt. A `token` counts wherever it was sent, as long as that part could be read.
        let token = [queryParameters, bodyParameters].lazy.compactMap { try? $0.get() }.compactMap(SoftphoneRequest.token).first
        let app: AppRecord
        switch await authenticate(request, token: token, context: context) {
        case .app(let found): app = found
        case .refused(let stale): return unauthorized(stale: stale, format)
        case .throttled(let seconds):
            var response = Self.respond(Self.throttled(seconds), format)
            response.headers[.retryAfter] = String(seconds)
            return response
        case .unavailable: return Self.respond(Self.unavailable, format)
        }

        let parsed: SoftphoneRequest
        switch (queryParameters, bodyParameters) {
        case (.failure(let error), _), (_, .failure(let error)):
            return Self.respond(Self.unprocessable(error, logger: context.logger), format)
        case (.success(let inQuery), .success(let inBody)):
            switch SoftphoneRequest.parse(inQuery + inBody) {
            case .success(let value): parsed = value
            case .failure(let error): return Self.respond(Self.unprocessable(error, logger: context.logger), format)
            }
        }
        return Self.respond(await purchase(parsed, app: app, request: request, context: context), format)
    }

    /// Queues and (within the sync wait) validates the receipt, and says what the softphone may do.
    func purchase(_ parsed: SoftphoneRequest, app: AppRecord, request: Request, context: IngestRequestContext) async -> SoftphoneReply {
        let product = parsed.productCode
        // Apple's answer can only confirm what the receipt already lists, so a receipt without the
        // product is refused at once, without a job or a call to Apple.
        guard parsed.receipt.receipt.inApp.contains(where: { $0.productID == product && $0.cancellationDate == nil }) else {
            context.logger.debug("Softphone purchase refused", metadata: ["softphone.outcome": "product_absent"])
            return Self.productAbsent(product: product)
        }
        var submission = parsed.submission
        submission.ipAddress = api.clientAddress(request, context: context)
        let outcome = await api.ingestion.ingest(
            parsed.receipt, submission: submission, app: app, origin: .softphone, logger: context.logger)
        let reply = Self.reply(to: outcome, product: product)
        context.logger.debug(
            "Softphone purchase answered",
            metadata: ["softphone.status": "\(reply.status)", "receipt.id": "\(outcome.resource?.id.uuidString.lowercased() ?? "-")"])
        return reply
    }

    /// The answer to an ingestion outcome for a receipt that lists `product` (pure): 200 only when
    /// Apple said valid and its answer lists an uncancelled purchase of `product` that no other
    /// account claimed; 202 while queued; 402 when forged, invalid, without the product or already
    /// claimed; 503 when nothing was queued.
    public static func reply(to outcome: ReceiptIngestion.Outcome, product: String) -> SoftphoneReply {
        switch outcome {
        case .validated(let resource):
            guard resource.validationStatus == .valid else { return notVerified(resource) }
            guard let purchase = purchase(of: product, in: resource) else {
                return productAbsent(product: product, receiptID: resource.id)
            }
            // Another account already presented this transaction: crediting it again would deliver
            // one payment twice (a shared receipt).
            guard !purchase.isConflict else {
                return SoftphoneReply(
                    status: 402, message: "This purchase has already been used by another account.",
                    fields: [SoftphoneReply.Field("receipt_id", resource.id.uuidString.lowercased())])
            }
            return SoftphoneReply(
                status: 200, message: "Your purchase has been verified. Thank you!",
                fields: facts(resource, product: product, transactionID: purchase.transactionID))
        case .queued(let resource):
            return SoftphoneReply(
                status: 202,
                message: "Your purchase has been received and will be credited once the App Store confirms it.",
                fields: facts(resource, product: product, transactionID: purchase(of: product, in: resource)?.transactionID))
        case .fraud(let resource):
            return notVerified(resource)
        case .unavailable:
            return unavailable
        }
    }

    /// The latest purchase of `product` that was not cancelled (refunded purchases count as never
    /// made), preferring one no other account claimed.
    static func purchase(of product: String, in resource: ReceiptResource) -> InAppPurchaseResource? {
        resource.inAppPurchases.filter { $0.productID == product && $0.cancellationDate == nil }
            .max { ($0.isConflict ? 0 : 1, $0.purchaseDate?.ms ?? 0) < ($1.isConflict ? 0 : 1, $1.purchaseDate?.ms ?? 0) }
    }

    private static func facts(_ resource: ReceiptResource, product: String, transactionID: String?) -> [SoftphoneReply.Field] {
        var fields = [
            SoftphoneReply.Field("receipt_id", resource.id.uuidString.lowercased()), SoftphoneReply.Field("product", product),
            SoftphoneReply.Field("validation_status", resource.validationStatus.rawValue),
        ]
        if let environment = resource.environment { fields.append(SoftphoneReply.Field("environment", environment)) }
        if let transactionID { fields.append(SoftphoneReply.Field("transaction_id", transactionID)) }
        return fields
    }

    private static func notVerified(_ resource: ReceiptResource) -> SoftphoneReply {
        SoftphoneReply(
            status: 402, message: "The purchase could not be verified with the App Store.",
            fields: [SoftphoneReply.Field("receipt_id", resource.id.uuidString.lowercased())])
    }

    private static func productAbsent(product: String, receiptID: UUID? = nil) -> SoftphoneReply {
        SoftphoneReply(
            status: 402, message: "The purchased product was not found in the App Store receipt.",
            fields: [SoftphoneReply.Field("product", product)]
                + (receiptID.map { [SoftphoneReply.Field("receipt_id", $0.uuidString.lowercased())] } ?? []))
    }

    static let unavailable = SoftphoneReply(
        status: 503, message: "The purchase service is temporarily unavailable. Please try again in a moment.")
    static let unsupportedMediaType = SoftphoneReply(
        status: 415, message: "Unsupported Content-Type: send application/x-www-form-urlencoded or application/json.")
    static let unauthorizedReply = SoftphoneReply(status: 401, message: "Authentication is required.")

    static func throttled(_ seconds: Int) -> SoftphoneReply {
        SoftphoneReply(status: 429, message: "Too many failed logins. Please try again in \(seconds) seconds.")
    }

    static func tooLarge(_ limit: Int) -> SoftphoneReply {
        SoftphoneReply(status: 413, message: "The request is too large (at most \(limit) bytes).")
    }

    /// The shared gate's refusal (``InputHygieneMiddleware``) in the softphone's format, with
    /// `final=1` like every answer: 422 naming the field, or 413.
    public static func refusal(_ request: Request, status: HTTPResponse.Status, errors: [FieldError]) -> Response {
        let isJSON = request.headers[.contentType].map { $0.lowercased().hasPrefix("application/json") } ?? false
        let format = SoftphoneFormat.negotiate(accept: request.headers[values: .accept].joined(separator: ","), requestWasJSON: isJSON)
        guard status == .unprocessableContent, let first = errors.first else {
            return respond(SoftphoneReply(status: Int(status.code), message: "The request is too large."), format)
        }
        return respond(
            SoftphoneReply(
                status: 422, message: "The request could not be read: \(first.field) \(first.reason).",
                fields: [SoftphoneReply.Field("field", first.field)]),
            format)
    }

    private static func unprocessable(_ error: SoftphoneRequestError, logger: Logger) -> SoftphoneReply {
        logger.debug("Softphone request refused", metadata: ["error.code": "\(error.codeName)"])
        return SoftphoneReply(status: 422, message: error.message)
    }

    private static func respond(_ reply: SoftphoneReply, _ format: SoftphoneFormat) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = format.contentType
        // Retry-After on 503 only: the softphone (or its user) may send the same receipt again.
        if reply.status == 503 { headers[.retryAfter] = "5" }
        return Response(
            status: HTTPResponse.Status(code: reply.status), headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: reply.body(format))))
    }

    private func unauthorized(stale: Bool, _ format: SoftphoneFormat) -> Response {
        var response = Self.respond(Self.unauthorizedReply, format)
        let nonce = nonces.issue(now: api.ingestion.now())
        for challenge in SoftphoneAuth.challenges(nonce: nonce, stale: stale) {
            response.headers.append(HTTPField(name: .wwwAuthenticate, value: challenge))
        }
        return response
    }

    enum Authentication {
        case app(AppRecord)
        /// 401; `stale` when the password was right but the nonce must be renewed.
        case refused(stale: Bool)
        /// 429: too many failures from this address or against this username; back in seconds.
        case throttled(Int)
        /// The credential store did not answer: 503, never taken for wrong credentials.
        case unavailable
    }

    /// The app the request authenticates as. Why a request was refused goes to the security log
    /// (``AuthGate``) as a bounded reason with the client address and username, never with the
    /// credentials, and is never told to the caller. Digest and Basic carry a password someone
    /// chose: the throttle is asked before they are checked. `token=` carries a generated token:
    /// only wrong ones are throttled.
    func authenticate(_ request: Request, token: String?, context: IngestRequestContext) async -> Authentication {
        let logger = context.logger
        let address = api.clientAddress(request, context: context)
        let now = api.ingestion.now()
        func refused(_ attempt: AuthAttempt, _ reason: AuthRefusal) async -> Authentication {
            if case .closed(let seconds) = await api.gate.refused(attempt, reason, now: now) { return .throttled(seconds) }
            return .refused(stale: false)
        }
        func credentials(_ username: String) async -> Result<SoftphoneCredentials?, any Error> {
            do {
                return .success(try await api.catalog.softphoneCredentials(username: username))
            } catch let failure as StoreFailure where failure.isPermanent {
                return .success(nil)  // a value the store cannot hold is nobody's username: 401
            } catch {
                logger.error("Softphone credential lookup failed", error: error)
                return .failure(error)
            }
        }
        /// The password doors: throttled before the check, so a right guess while closed is not
        /// told apart from a wrong one.
        func checkPassword(_ username: String, _ check: (SoftphoneCredentials) -> Authentication?) async -> Authentication {
            let attempt = AuthAttempt(door: .softphone, address: address, account: username)
            if case .closed(let seconds) = await api.gate.admit(attempt, now: now) { return .throttled(seconds) }
            switch await credentials(username) {
            case .success(let found?):
                guard let outcome = check(found) else { return await refused(attempt, .wrongSecret) }
                if case .app = outcome { api.gate.granted(attempt) }
                if case .refused(stale: false) = outcome { return await refused(attempt, .replayed) }
                return outcome
            case .success(nil): return await refused(attempt, .unknownCredential)
            case .failure: return .unavailable
            }
        }
        let target = request.head.path ?? request.uri.string
        if let header = request.headers[.authorization] {
            switch SoftphoneAuth.parseAuthorization(header, requestTargetLength: target.utf8.count) {
            case .digest(let response):
                return await checkPassword(response.username) { found in
                    switch SoftphoneAuth.verify(
                        response, credentials: found, method: request.method.rawValue, requestTarget: target, nonces: nonces, now: now)
                    {
                    case .valid(let expiresAt):
                        switch replayGuard.admit(nonce: response.nonce, nc: response.nc ?? "", expiresAt: expiresAt, now: now) {
                        case .admitted: return .app(found.app)
                        case .replayed: return .refused(stale: false)
                        case .exhausted:
                            // The password was right: a new nonce, no failure.
                            logger.debug("Softphone nonce exhausted", metadata: ["softphone.auth": "digest"])
                            return .refused(stale: true)
                        }
                    case .stale:
                        logger.debug("Softphone nonce stale", metadata: ["softphone.auth": "digest"])
                        return .refused(stale: true)
                    case .invalid: return nil
                    }
                }
            case .basic(let username, let password):
                return await checkPassword(username) { found in
                    SoftphoneAuth.verifyBasic(username: username, password: password, credentials: found) ? .app(found.app) : nil
                }
            case .malformed:
                return await refused(AuthAttempt(door: .softphone, address: address), .malformed)
            case .other:
                break
            }
        }
        // No credentials at all is the softphone's first request, before the Digest challenge:
        // not a guess, neither logged nor throttled.
        guard let token else { return .refused(stale: false) }
        let attempt = AuthAttempt(door: .softphone, address: address)
        if let seconds = api.gate.isKnownClosed(attempt, now: now) { return .throttled(seconds) }
        // API tokens are short; anything long cannot be one and is not worth a lookup.
        guard !token.isEmpty, token.utf8.count <= 200 else { return await refused(attempt, .malformed) }
        do {
            if let app = try await api.catalog.authenticate(token: token) { return .app(app) }
            return await refused(attempt, .unknownCredential)
        } catch let failure as StoreFailure where failure.isPermanent {
            return await refused(attempt, .unknownCredential)
        } catch {
            logger.error("Token lookup failed", error: error)
            return .unavailable
        }
    }
}

extension ReceiptIngestion.Outcome {
    /// The resource of the outcome, if any.
    var resource: ReceiptResource? {
        switch self {
        case .validated(let resource), .queued(let resource), .fraud(let resource): resource
        case .unavailable: nil
        }
    }
}
