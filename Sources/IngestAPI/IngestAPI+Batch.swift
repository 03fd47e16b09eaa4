import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ReceiptCore

extension IngestAPI {
    /// The most items one batch holds.
    public static let maxBatchItems = 1_000
    /// The largest batch body (413 beyond): the single endpoint's limit does not apply to it.
    public static let maxBatchBytes = 10 << 20
    /// The path of bulk imports (POST), whose body the input check leaves to the handler (item by item).
    public static let batchPath = "/client/itunes_connect/receipts/batch"
    /// The header naming the import a batch belongs to (`receiptq import` sends one per file).
    static let importIDHeader = HTTPField.Name("Receiptq-Import-Id")!
    /// `true`: the import's changes become events and webhooks like live ones (default: not).
    static let importEventsHeader = HTTPField.Name("Receiptq-Import-Events")!
    /// Items enqueued at once: the Redis writer pipelines whatever is submitted together.
    static let batchParallelism = 64

    /// `POST /client/itunes_connect/receipts/batch`: up to 1,000 receipts shaped like the single
    /// endpoint's bodies, as a JSON array (`application/json`) or one per line
    /// (`application/x-ndjson`), 10 MB at most. Each item is checked and queued as a single POST
    /// is — the same idempotency, the same local signature check — but into the `import` queue
    /// and without waiting for Apple; the answer lists each item's outcome in input order
    /// (`status` 206 queued, 200 already validated, 402 fraud, 422 with its errors, 503 not
    /// queued). The batch is 200 when every item has its outcome, and 503 with `Retry-After` when
    /// Redis took none of them. A 2xx item is durably queued.
    func submitBatch(_ request: Request, context: IngestRequestContext) async throws -> Response {
        let app: AppRecord
        switch await authorize(request, context: context) {
        case .success(let found): app = found
        case .failure(let refusal): return refusal.response
        }
        let mediaType = request.headers[.contentType].flatMap(BodyKind.mediaType)
        guard mediaType == "application/json" || mediaType == "application/x-ndjson" else {
            return json(.unsupportedMediaType, ["error": .string("Content-Type must be application/json (an array) or application/x-ndjson")])
        }
        let importID: UUID
        if let header = request.headers[Self.importIDHeader] {
            guard let given = UUID(uuidString: header) else {
                return unprocessable([FieldError(field: "Receiptq-Import-Id", reason: "must be a UUID")])
            }
            importID = given
        } else {
            importID = JobID.make(at: now())
        }
        let body: [UInt8]
        do {
            body = Array(try await request.body.collect(upTo: Self.maxBatchBytes).readableBytesView)
        } catch is NIOTooManyBytesError {
            return json(.contentTooLarge, ["error": .string("body larger than \(Self.maxBatchBytes) bytes")])
        }
        // Each item with the number a client finds it by: its index in the array, its line in NDJSON.
        let items: [(number: Int, range: Range<Int>)]
        if mediaType == "application/json" {
            guard let elements = BulkItems.arrayElements(body) else {
                return unprocessable([FieldError(field: "body", reason: "must be a JSON array of receipts")])
            }
            items = elements.enumerated().map { ($0.offset, $0.element) }
        } else {
            items = BulkItems.lines(body)
        }
        guard !items.isEmpty else { return unprocessable([FieldError(field: "body", reason: "must hold at least one receipt")]) }
        guard items.count <= Self.maxBatchItems else {
            return json(.contentTooLarge, ["error": .string("more than \(Self.maxBatchItems) items in one batch")])
        }
        let events: Bool
        switch request.headers[Self.importEventsHeader]?.lowercased() {
        case nil, "false"?: events = false
        case "true"?: events = true
        default: return unprocessable([FieldError(field: "Receiptq-Import-Events", reason: "must be true or false")])
        }
        let address = clientAddress(request, context: context)
        let logger = context.logger
        let payloads = items.map { Array(body[$0.range]) }
        let api = self
        let results = await withTaskGroup(of: (Int, BatchItemResult).self) { group in
            var results = [BatchItemResult?](repeating: nil, count: payloads.count)
            for (position, item) in payloads.enumerated() {
                if position >= Self.batchParallelism, let (done, result) = await group.next() { results[done] = result }
                group.addTask {
                    (position, await api.batchItem(item, app: app, importID: importID, events: events, address: address, logger: logger))
                }
            }
            for await (done, result) in group { results[done] = result }
            return results.map { $0 ?? BatchItemResult(status: 503) }
        }
        let key = mediaType == "application/json" ? "index" : "line"
        let answers: [JSONValue] = zip(items, results).map { item, result in
            var object = result.json
            object[key] = .number(Double(item.number))
            return .object(object)
        }
        let unavailable = results.filter { $0.status == 503 }.count
        context.logger.info(
            "Batch submitted",
            metadata: [
                "app.id": "\(app.id.canonical)", "import.id": "\(importID.canonical)", "batch.items": "\(items.count)",
                "batch.unavailable": "\(unavailable)",
            ])
        var counts: [String: Int] = [:]
        for result in results { counts[result.category, default: 0] += 1 }
        var response = json(
            unavailable == results.count ? .serviceUnavailable : .ok,
            [
                "import_id": .string(importID.canonical), "items": .array(answers),
                "counts": .object(counts.mapValues { .number(Double($0)) }),
            ])
        if unavailable > 0 { response.headers[.retryAfter] = "5" }
        return response
    }

    /// One item: checked, planned and queued like a single POST, into the import queue.
    func batchItem(
        _ bytes: [UInt8], app: AppRecord, importID: UUID, events: Bool, address: String?, logger: Logger
    ) async
        -> BatchItemResult
    {
        if let problem = InputHygiene.jsonProblem(bytes) { return BatchItemResult(status: 422, errors: [problem]) }
        guard let parsed = JSONValue.parseLeniently(bytes) else {
            return BatchItemResult(status: 422, errors: [FieldError(field: "body", reason: "must be valid JSON")])
        }
        let submit: SubmitReceiptRequest
        switch SubmitReceiptRequest.parse(parsed) {
        case .success(let value): submit = value
        case .failure(let failure): return BatchItemResult(status: 422, errors: failure.errors)
        }
        var submission = submit.submission
        if submit.ipAddressOmitted { submission.ipAddress = address }
        var job = ReceiptIngestion.plan(
            submit.receipt, submission: submission, app: app, origin: .api, authenticity: ingestion.authenticity, at: now())
        job.envelope.importID = importID
        job.envelope.importEvents = events ? true : nil
        let outcome = await ingestion.enqueue(job, waits: false, logger: logger)
        let resource: ReceiptResource
        let status: Int
        switch outcome {
        case .validated(let found): (status, resource) = (200, found)
        case .queued(let found): (status, resource) = (206, found)
        case .fraud(let found): (status, resource) = (402, found)
        case .unavailable: return BatchItemResult(status: 503)
        }
        return BatchItemResult(
            status: status, id: resource.id, duplicate: resource.id != job.envelope.id, fraudReason: resource.fraudReason,
            validationStatus: resource.validationStatus.rawValue)
    }
}

/// One item's outcome in a batch answer.
struct BatchItemResult: Sendable {
    var status: Int
    var id: UUID?
    var duplicate = false
    var fraudReason: String?
    var validationStatus: String?
    var errors: [FieldError] = []

    /// `accepted`, `duplicate`, `fraud`, `invalid` or `unavailable`: what the summary counts.
    var category: String {
        switch status {
        case 422: "invalid"
        case 503: "unavailable"
        case 402: duplicate ? "duplicate" : "fraud"
        default: duplicate ? "duplicate" : "accepted"
        }
    }

    var json: [String: JSONValue] {
        var object: [String: JSONValue] = ["status": .number(Double(status))]
        if let id { object["id"] = .string(id.canonical) }
        if duplicate { object["duplicate"] = .bool(true) }
        if let fraudReason { object["fraud_reason"] = .string(fraudReason) }
        if let validationStatus { object["validation_status"] = .string(validationStatus) }
        if !errors.isEmpty {
            object["errors"] = .array(errors.map { .object(["field": .string($0.field), "reason": .string($0.reason)]) })
        }
        return object
    }
}
