import Foundation
import Hummingbird
import Logging
import NIOCore
import ReceiptCore

extension IngestAPI {
    /// `POST /apple/notifications/{app}/{token}`: App Store Server Notifications, V2 or V1.
    ///
    /// 200 only once the notification is durably in Redis (or already was, under its UUID); 503
    /// while Redis cannot take it, so Apple retries (never a 4xx for a transient failure: Apple
    /// stops retrying on some). An unknown app or token is 404 (429 once the address has guessed
    /// too often), a V1 password that is not the app's
    /// shared secret 401, a forged or foreign notification 402 with the reason, a body that is not a
    /// notification 422, one too large 413. Refusals are logged with the reason, never the payload.
    func receiveNotification(_ request: Request, context: IngestRequestContext) async throws -> Response {
        guard let name = context.parameters.get("app"), let token = context.parameters.get("token") else { return notFound() }
        let attempt = AuthAttempt(door: .notificationToken, address: clientAddress(request, context: context))
        if let seconds = gate.isKnownClosed(attempt, now: now()) { return tooManyFailures(seconds) }
        /// A URL that names no app: a guess, counted against the address (Apple's own retries of a
        /// right URL never fail here).
        func unknown() async -> Response {
            metrics.notificationReceived(.notFound)
            if case .closed(let seconds) = await gate.refused(attempt, .unknownCredential, now: now()) { return tooManyFailures(seconds) }
            return notFound()
        }
        let app: AppRecord
        do {
            guard let found = try await catalog.notificationApp(name: name, token: token) else { return await unknown() }
            app = found
        } catch let failure as StoreFailure where failure.isPermanent {
            return await unknown()  // a name the store cannot hold is no app's
        } catch {
            context.logger.error("Notification app lookup failed", error: error)
            metrics.notificationReceived(.unavailable)
            return unavailable()
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: configuration.maxBodyBytes)
        } catch is NIOTooManyBytesError {
            return json(.contentTooLarge, ["error": .string("body larger than \(configuration.maxBodyBytes) bytes")])
        }
        guard let parsed = try? JSONValue.parse(body.readableBytesView), parsed.objectValue != nil else {
            metrics.notificationReceived(.invalid)
            return unprocessable([FieldError(field: "body", reason: "must be a JSON object")])
        }
        let metadata: Logger.Metadata = ["app.id": "\(app.id.uuidString.lowercased())"]
        switch await ingestion.ingest(notification: parsed, app: app, logger: context.logger) {
        case .accepted(let uuid, let duplicate):
            metrics.notificationReceived(duplicate ? .duplicate : .accepted)
            context.logger.debug(
                "Notification accepted", metadata: metadata.merging(["notification.duplicate": "\(duplicate)"]) { $1 })
            return json(.ok, ["status": .string("accepted"), "notification_uuid": .string(uuid), "duplicate": .bool(duplicate)])
        case .forged(let reason):
            metrics.notificationReceived(.forged)
            context.logger.warning("Notification refused: not Apple's or not this app's", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
            return json(.paymentRequired, ["error": .string("forged"), "reason": .string(reason)])
        case .wrongSecret:
            metrics.notificationReceived(.unauthorized)
            context.logger.warning("V1 notification refused: password is not the app's shared secret", metadata: metadata)
            return json(.unauthorized, ["error": .string("unauthorized")])
        case .invalid(let error):
            metrics.notificationReceived(.invalid)
            context.logger.info("Notification refused", metadata: metadata.merging(["request.fields": "\(error.field)"]) { $1 })
            return unprocessable([error])
        case .unavailable:
            metrics.notificationReceived(.unavailable)
            return unavailable()
        }
    }
}
