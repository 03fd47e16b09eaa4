import Foundation
import Logging
import OpenSSL
import ReceiptCore

/// A receipt as it arrived, decoded locally: the bytes, their decoded form, and the normalized base64.
public struct DecodedReceipt: Sendable, Equatable {
    public var bytes: [UInt8]
    public var receipt: AppReceipt
    /// Base64 as stored and sent to Apple: whitespace removed, `+` restored.
    public var base64: String

    /// Decodes the base64 text a client sent (tolerating `+` turned into spaces and line breaks).
    /// - Returns: the receipt, or the `receipt` field error to answer with 422.
    public static func decode(_ text: String) -> Result<DecodedReceipt, FieldError> {
        do {
            let bytes = try ReceiptDecoder.base64Bytes(text)
            let receipt = try ReceiptDecoder.decode(bytes: bytes)
            return .success(DecodedReceipt(bytes: bytes, receipt: receipt, base64: ReceiptDecoder.normalizedBase64(text, bytes: bytes)))
        } catch {
            return .failure(FieldError(field: "receipt", reason: "is not an App Store receipt (\(error.reason))"))
        }
    }
}

/// The ingestion rules both front doors share (the client API and the Cloud Softphone web
/// service): local signature and bundle checks, an idempotent durable enqueue, and a bounded wait
/// for the worker.
public struct ReceiptIngestion: Sendable {
    /// What became of a receipt; each front door maps it to its own status codes.
    public enum Outcome: Sendable, Equatable {
        /// Apple answered within the wait (valid or invalid): the stored resource.
        case validated(ReceiptResource)
        /// Durably queued, not validated yet (Apple slow or unreachable): the resource as far as known.
        case queued(ReceiptResource)
        /// Not signed by Apple, or not this app's bundle: queued to be stored with `is_fraud`.
        case fraud(ReceiptResource)
        /// Redis did not take it: nothing is stored, the client should retry.
        case unavailable
    }

    let intake: any ReceiptIntake
    let catalog: any ReceiptCatalog
    let authenticity: any ReceiptAuthenticity
    /// Checks StoreKit 2 signed transactions (nil: `POST /client/transactions` takes only ids).
    let signedPayloads: (any SignedPayloadVerifier)?
    let syncWait: Duration
    let now: @Sendable () -> Date

    /// Creates the rules.
    /// - Parameters:
    ///   - intake: Redis.
    ///   - catalog: Postgres (read side), for a duplicate that is already stored.
    ///   - authenticity: the local signature check.
    ///   - signedPayloads: the JWS check of StoreKit 2 signed transactions.
    ///   - syncWait: how long to wait for the worker.
    ///   - now: the injected clock.
    public init(
        intake: any ReceiptIntake, catalog: any ReceiptCatalog, authenticity: any ReceiptAuthenticity,
        signedPayloads: (any SignedPayloadVerifier)? = nil, syncWait: Duration, now: @escaping @Sendable () -> Date
    ) {
        self.intake = intake
        self.catalog = catalog
        self.authenticity = authenticity
        self.signedPayloads = signedPayloads
        self.syncWait = syncWait
        self.now = now
    }

    /// Checks, queues and (up to the sync wait) validates one receipt of `app`.
    public func ingest(
        _ decoded: DecodedReceipt, submission: Submission, app: AppRecord, origin: JobOrigin, logger: Logger
    ) async -> Outcome {
        await enqueue(Self.plan(decoded, submission: submission, app: app, origin: origin, authenticity: authenticity, at: now()), logger: logger)
    }

    /// A receipt made into its job, with nothing written yet: the local signature, bundle and
    /// device checks, the envelope, the resource shown until a worker answers, and the key that
    /// makes the same receipt the same job. Every front door's receipts go through it (`scripts/bench
    /// ingest` times it as the server's "check + job" stage).
    public static func plan(
        _ decoded: DecodedReceipt, submission: Submission, app: AppRecord, origin: JobOrigin, authenticity: any ReceiptAuthenticity,
        at: Date
    ) -> PlannedJob {
        let receipt = decoded.receipt
        let deviceMismatch = Self.deviceMismatch(receipt, submission: submission, app: app)
        let fraudReason =
            authenticity.fraudReason(bytes: decoded.bytes, receipt: receipt)
            ?? (app.owns(bundleID: receipt.bundleID) ? nil : "bundle_id_not_registered")
            ?? (deviceMismatch ? "device_mismatch" : nil)
        let envelope = JobEnvelope(
            id: JobID.make(at: at), appID: app.id, enqueuedAt: at, origin: origin,
            payload: .receipt(
                ReceiptJob(
                    receipt: decoded.base64, style: receipt.style, bundleID: receipt.bundleID, environment: receipt.environment.apiName,
                    submission: submission, fraudReason: fraudReason,
                    // Only a receipt whose signature just checked may name the transaction the Server
                    // API is asked about (an attacker chooses the ids of an unchecked one); none: empty.
                    transactionID: fraudReason == nil ? (receipt.inApp.first?.transactionID ?? "") : nil)))
        // The same bytes from the same app: one receipt, one id, one job. A replay from another
        // device is its own (fraud) record, not an echo of the device's accepted one.
        let idempotencyBytes =
            fraudReason == "device_mismatch" ? decoded.bytes + Array("\u{0}device\u{0}\(submission.identifierForVendor ?? "")".utf8) : decoded.bytes
        return PlannedJob(envelope, purchases: receipt.inApp, idempotencyKey: Digest.hex(Digest.sha256(idempotencyBytes)))
    }

    /// Whether the receipt was issued to another device than the `identifier_for_vendor` sent:
    /// its SHA-1 device hash does not cover that id (checked for unified receipts, when the app
    /// has the device check on; a receipt without a hash cannot say, and is not refused for it).
    static func deviceMismatch(_ receipt: AppReceipt, submission: Submission, app: AppRecord) -> Bool {
        guard app.checksDevice, let text = submission.identifierForVendor, let vendor = UUID(uuidString: text),
            let input = DeviceHash.input(identifierForVendor: vendor, receipt: receipt), let expected = receipt.sha1Hash
        else { return false }
        return Digest.sha1(input) != expected
    }

    /// Queues a planned job and waits for the worker (unless `waits` is false: a bulk import's),
    /// once per idempotency key within the window.
    func enqueue(_ job: PlannedJob, waits: Bool = true, logger: Logger) async -> Outcome {
        let (envelope, pending) = (job.envelope, job.pending)
        let result: IntakeResult
        do {
            result = try await intake.enqueue(
                envelope, pending: pending, idempotencyKey: job.idempotencyKey,
                wait: waits && envelope.payload.purchase?.fraudReason == nil ? syncWait : .zero)
        } catch {
            logger.error("Receipt not queued: Redis unavailable", error: error)
            return .unavailable
        }
        switch result {
        case .answered(let resource): return Self.outcome(resource)
        case .queued: return Self.outcome(pending)
        case .duplicate(let existing):
            var known = pending
            known.id = existing
            do {
                if let stored = try await catalog.receipt(id: existing, appID: envelope.appID) {
                    known = stored
                } else if let queued = try await intake.pendingResource(id: existing) {
                    known = queued
                }
            } catch {
                // It is durably known under `existing`; what it looks like can wait for a GET.
                logger.warning("Duplicate receipt: stored resource not readable", error: error)
            }
            return Self.outcome(known)
        }
    }

    private static func outcome(_ resource: ReceiptResource) -> Outcome {
        if resource.isFraud { return .fraud(resource) }
        switch resource.validationStatus {
        case .valid, .invalid: return .validated(resource)
        case .pending, .failed, .fraud: return .queued(resource)
        }
    }
}

/// A checked submission made into its job, before anything is written.
public struct PlannedJob: Sendable {
    /// What the worker gets.
    public var envelope: JobEnvelope
    /// What `GET …/receipts/{id}` shows until the worker stores the receipt: its purchases as
    /// decoded locally, or none and `is_fraud` for a forgery.
    public var pending: ReceiptResource
    /// The same receipt (or transaction) of the same app within the window is this job.
    public var idempotencyKey: String

    /// Makes the job of `envelope`, whose pending resource shows `purchases` unless it is fraud.
    public init(_ envelope: JobEnvelope, purchases: [InAppPurchase], idempotencyKey: String) {
        self.envelope = envelope
        self.idempotencyKey = idempotencyKey
        let fraudReason = envelope.payload.purchase?.fraudReason
        pending = ReceiptResource.pending(envelope, purchases: fraudReason == nil ? purchases : [])
        if let fraudReason {
            pending.isFraud = true
            pending.fraudReason = fraudReason
            pending.validationStatus = .fraud
        }
    }
}
