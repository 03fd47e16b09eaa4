import Foundation
import Logging
import OpenSSL
import ReceiptCore

extension ReceiptIngestion {
    /// What became of a notification Apple posted; the door maps it to HTTP.
    public enum NotificationOutcome: Sendable, Equatable {
        /// Durably queued (or already queued or stored under the same UUID): Apple may stop retrying.
        case accepted(uuid: String, duplicate: Bool)
        /// Not Apple's, or not this app's: a bounded reason (`untrusted_chain`, `bundle_id_mismatch`, …).
        case forged(reason: String)
        /// A V1 body whose `password` is not the app's shared secret.
        case wrongSecret
        /// Not a notification at all.
        case invalid(FieldError)
        /// Redis did not take it: nothing is stored, Apple retries.
        case unavailable
    }

    /// Checks and queues one App Store Server Notification for `app`, under the same promise as a
    /// receipt: accepted only once it is durably in Redis, once per notification UUID.
    ///
    /// V2 (`{"signedPayload": JWS}`): the payload's chain and signature, then its nested signed
    /// transaction and renewal info, each Apple's; bundle id, app Apple id and environment the app's.
    /// V1 (`notification_type`, `password`, …): the password compared in constant time with the
    /// app's shared secret, then dropped: the queued body never holds it.
    /// - Parameter origin: `apple` (the endpoint) or `history` (the scheduler's recovery sweep).
    public func ingest(
        notification body: JSONValue, app: AppRecord, origin: JobOrigin = .apple, logger: Logger
    ) async -> NotificationOutcome {
        let at = now()
        let job: NotificationJob
        if body["signedPayload"] != nil {
            guard let jws = body["signedPayload"]?.stringValue, !jws.isEmpty else {
                return .invalid(FieldError(field: "signedPayload", reason: "must be a compact JWS"))
            }
            guard let signedPayloads else {
                return .invalid(FieldError(field: "signedPayload", reason: "cannot be checked here: no trust roots are configured"))
            }
            let notification: JWSNotificationPayload
            switch checkNotification(jws, app: app, verifier: signedPayloads) {
            case .success(let checked): notification = checked
            case .failure(let failure): return .forged(reason: failure.reason)
            }
            job = NotificationJob(
                notificationID: notification.notificationUUID, body: jws, bundleID: notification.bundleID,
                environment: notification.environment?.lowercased())
        } else if body["notification_type"] != nil {
            guard let type = body["notification_type"]?.stringValue, !type.isEmpty else {
                return .invalid(FieldError(field: "notification_type", reason: "must be a string"))
            }
            let password = body["password"]?.stringValue ?? ""
            guard let secret = app.sharedSecret, Digest.constantTimeEqual(Digest.sha256(Array(password.utf8)), Digest.sha256(Array(secret.utf8)))
            else { return .wrongSecret }
            guard case .object(var fields) = body else { return .invalid(FieldError(field: "body", reason: "must be a JSON object")) }
            fields["password"] = nil
            let text = JSONValue.object(fields).encodedText
            if let bundleID = fields["bid"]?.stringValue, !app.owns(bundleID: bundleID) { return .forged(reason: "bundle_id_mismatch") }
            job = NotificationJob(
                // V1 has no UUID: Apple's retries repeat the body, so its digest names it.
                notificationID: "v1-" + Digest.hex(Digest.sha256(Array("\(type)\u{0}\(text)".utf8))), body: text,
                bundleID: fields["bid"]?.stringValue,
                environment: (fields["environment"]?.stringValue).map { $0.lowercased().hasPrefix("prod") ? "production" : "sandbox" })
        } else {
            return .invalid(FieldError(field: "signedPayload", reason: "is required (or notification_type for a V1 notification)"))
        }
        let envelope = JobEnvelope(id: JobID.make(at: at), appID: app.id, enqueuedAt: at, origin: origin, payload: .notification(job))
        let uuid = job.notificationID
        do {
            let result = try await intake.enqueue(
                envelope, pending: nil, idempotencyKey: Digest.hex(Digest.sha256(Array("notification\u{0}\(uuid)".utf8))), wait: .zero)
            if case .duplicate = result { return .accepted(uuid: uuid, duplicate: true) }
            return .accepted(uuid: uuid, duplicate: false)
        } catch {
            logger.error("Notification not queued: Redis unavailable", error: error)
            return .unavailable
        }
    }

    /// The V2 checks: the payload, and each nested JWS, signed by Apple and about this app.
    private func checkNotification(
        _ jws: String, app: AppRecord, verifier: any SignedPayloadVerifier
    ) -> Result<JWSNotificationPayload, JWSFailure> {
        let expectation = JWSExpectation(bundleIDs: app.bundleIDs, appAppleID: app.appAppleID)
        let notification: JWSNotificationPayload
        switch verifier.verify(jws) {
        case .success(let verified):
            guard let payload = try? JWSNotificationPayload(json: verified.payload) else { return .failure(.malformedPayload) }
            notification = payload
        case .failure(let failure):
            return .failure(failure)
        }
        if let failure = expectation.failure(for: notification.json) { return .failure(failure) }
        if app.sandboxPolicy == .reject, notification.environment == "Sandbox" { return .failure(.environmentMismatch) }
        let nested = [
            (notification.signedTransactionInfo, NestedKind.transaction), (notification.signedRenewalInfo, .renewal),
            (notification.signedAppTransactionInfo, .appTransaction),
        ]
        for case (let jws?, let kind) in nested {
            switch verifier.verify(jws) {
            case .success(let verified):
                let decodes =
                    switch kind {
                    case .transaction: (try? JWSTransactionPayload(json: verified.payload)) != nil
                    case .renewal: (try? JWSRenewalInfoPayload(json: verified.payload)) != nil
                    case .appTransaction: (try? JWSAppTransactionPayload(json: verified.payload)) != nil
                    }
                guard decodes else { return .failure(.malformedPayload) }
                if let failure = expectation.failure(for: verified.payload) { return .failure(failure) }
                // The nested documents are about the same environment as the notification (an app
                // transaction names it `receiptType`).
                let inner = verified.payload["environment"]?.stringValue ?? verified.payload["receiptType"]?.stringValue
                if let inner, let outer = notification.environment, inner != outer {
                    return .failure(.environmentMismatch)
                }
            case .failure(let failure):
                return .failure(failure)
            }
        }
        return .success(notification)
    }

    /// The signed documents a V2 notification may nest.
    private enum NestedKind {
        case transaction, renewal, appTransaction
    }
}
