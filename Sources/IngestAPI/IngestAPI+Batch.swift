import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ReceiptCore

extension IngestAPI {
    /// What a batch holds: receipts, or StoreKit 2 transactions, each item shaped like its single
    /// endpoint's body.
    enum BatchKind: Sendable {
        case receipts, transactions
    }

    /// The most items one batch holds.
    public static let maxBatchItems = 1_000
    /// The largest batch body (413 beyond): the single endpoint's limit does not apply to it.
    public static let maxBatchBytes = 10 << 20
    /// The path of bulk imports of receipts (POST), whose body the input check leaves to the
    /// handler (item by item).
    public static let batchPath = BulkEndpoint.receiptsPath
    /// The path of bulk imports of StoreKit 2 transactions (POST), checked item by item too.
    public static let transactionsBatchPath = BulkEndpoint.transactionsPath
    /// The header naming the import a batch belongs to (`receiptq import` sends one per file).
    static let importIDHeader = HTTPField.Name(BulkEndpoint.importIDHeader)!
    /// `true`: the import's changes become events and webhooks like live ones (default: not).
    static let importEventsHeader = HTTPField.Name(BulkEndpoint.importEventsHeader)!
    /// Items checked or enqueued at once: the Redis writer pipelines whatever is submitted together.
    static let batchParallelism = 64

    /// Whether `path` is one of the batch endpoints (their bodies are judged item by item).
    static func isBatchPath(_ path: String?) -> Bool { path == batchPath || path == transactionsBatchPath }

    /// `POST /client/itunes_connect/receipts/batch` and `POST /client/transactions/batch`: up to
    /// 1,000 items shaped like the single endpoint's bodies, as a JSON array (`application/json`)
    /// or one per line (`application/x-ndjson`), 10 MB at most. Each item is checked and queued as
    /// a single POST is — the same idempotency, the same local signature check — but into the
    /// `import` queue and without waiting for Apple; the answer lists each item's outcome in input
    /// order (`status` 206 queued, 200 already validated, 402 fraud, 422 with its errors, 503 not
    /// queued). An item repeating an earlier one of the same batch is always the later one's
    /// `duplicate`. The batch is 200 when every item has its outcome, and 503 with `Retry-After`
    /// when Redis took none of them. A 2xx item is durably queued.
    func submitBatch(_ request: Request, context: IngestRequestContext, kind: BatchKind) async throws -> Response {
        let app: AppRecord
        switch await authorize(request, context: context) {
        case .success(let found): app = found
        case .failure(let refusal): return refusal.response
        }
        let batch: BatchInput
        switch try await readBatch(request, kind: kind) {
        case .success(let read): batch = read
        case .failure(let refusal): return refusal.response
        }
        let at = now()
        let results = await settleBatch(
            batch, kind: kind, app: app, address: clientAddress(request, context: context), logger: context.logger, at: at)
        return await answerBatch(batch, results: results, kind: kind, app: app, logger: context.logger, at: at)
    }

    /// A batch request, read and checked: its import, its body and where each item is in it.
    struct BatchInput {
        var importID: UUID
        /// `application/json` (an array) or `application/x-ndjson` (one item a line).
        var mediaType: String
        var body: [UInt8]
        /// Each item with the number a client finds it by: its index in the array, its line in NDJSON.
        var items: [(number: Int, range: Range<Int>)]
        /// Whether the import's changes become events and webhooks.
        var events: Bool
    }

    /// Reads the batch's headers and body; a refusal is the answer to a batch that cannot be read.
    func readBatch(_ request: Request, kind: BatchKind) async throws -> Result<BatchInput, Refusal> {
        let noun = kind == .receipts ? "receipts" : "transactions"
        let mediaType = request.headers[.contentType].flatMap(BodyKind.mediaType)
        guard let mediaType, mediaType == "application/json" || mediaType == "application/x-ndjson" else {
            return .failure(
                Refusal(
                    response: json(
                        .unsupportedMediaType, ["error": .string("Content-Type must be application/json (an array) or application/x-ndjson")])))
        }
        let importID: UUID
        if let header = request.headers[Self.importIDHeader] {
            guard let given = UUID(uuidString: header) else {
                return .failure(Refusal(response: unprocessable([FieldError(field: "Receiptq-Import-Id", reason: "must be a UUID")])))
            }
            importID = given
        } else {
            importID = JobID.make(at: now())
        }
        let body: [UInt8]
        do {
            body = Array(try await request.body.collect(upTo: Self.maxBatchBytes).readableBytesView)
        } catch is NIOTooManyBytesError {
            return .failure(Refusal(response: json(.contentTooLarge, ["error": .string("body larger than \(Self.maxBatchBytes) bytes")])))
        }
        let items: [(number: Int, range: Range<Int>)]
        if mediaType == "application/json" {
            guard let elements = BulkItems.arrayElements(body) else {
                return .failure(Refusal(response: unprocessable([FieldError(field: "body", reason: "must be a JSON array of \(noun)")])))
            }
            items = elements.enumerated().map { ($0.offset, $0.element) }
        } else {
            items = BulkItems.lines(body)
        }
        guard !items.isEmpty else {
            return .failure(Refusal(response: unprocessable([FieldError(field: "body", reason: "must hold at least one item")])))
        }
        guard items.count <= Self.maxBatchItems else {
            return .failure(Refusal(response: json(.contentTooLarge, ["error": .string("more than \(Self.maxBatchItems) items in one batch")])))
        }
        let events: Bool
        switch request.headers[Self.importEventsHeader]?.lowercased() {
        case nil, "false"?: events = false
        case "true"?: events = true
        default: return .failure(Refusal(response: unprocessable([FieldError(field: "Receiptq-Import-Events", reason: "must be true or false")])))
        }
        return .success(BatchInput(importID: importID, mediaType: mediaType, body: body, items: items, events: events))
    }

    /// Checks every item (the signature checks in parallel), then queues the ones that passed;
    /// returns each item's outcome, in input order.
    ///
    /// Checked first, queued second: an item that repeats an earlier one of the batch is then
    /// always the later one's duplicate, whatever order Redis would have taken them in.
    func settleBatch(
        _ batch: BatchInput, kind: BatchKind, app: AppRecord, address: String?, logger: Logger, at: Date
    ) async -> [BatchItemResult] {
        let api = self
        let planned = await Self.concurrentMap(batch.items.count) { position in
            api.planBatchItem(Array(batch.body[batch.items[position].range]), kind: kind, app: app, address: address, at: at)
        }
        // The intake's rule (RedisScripts.intakeEnqueue): the same bytes without a user, or from
        // the same user, are the earlier item's duplicate; from another user, that user's claim.
        var firstWithKey: [String: Int] = [:]
        var firstOfUser: [String: Int] = [:]
        var earlier: [Int: Int] = [:]
        var queued: [(position: Int, job: PlannedJob)] = []
        for (position, plan) in planned.enumerated() {
            guard case .success(var job) = plan else { continue }
            let user = job.envelope.payload.userIdentifier ?? ""
            let claim = job.idempotencyKey + "\u{0}" + user
            if let first = user.isEmpty ? firstWithKey[job.idempotencyKey] : firstOfUser[claim] {
                earlier[position] = first
                continue
            }
            if firstWithKey[job.idempotencyKey] == nil { firstWithKey[job.idempotencyKey] = position }
            firstOfUser[claim] = position
            if let purchase = job.envelope.payload.purchase {
                job.envelope.payload = .importItem(ImportItem(importID: batch.importID, emitsEvents: batch.events, purchase: purchase))
            }
            queued.append((position, job))
        }
        let jobs = queued.map(\.job)
        let outcomes = await Self.concurrentMap(jobs.count) { index in
            await api.queueBatchItem(jobs[index], logger: logger)
        }
        var results = planned.map { plan -> BatchItemResult in
            if case .failure(let failure) = plan { return BatchItemResult(status: 422, errors: failure.errors) }
            return BatchItemResult(status: 503)
        }
        for (item, outcome) in zip(queued, outcomes) { results[item.position] = outcome }
        for (position, first) in earlier {
            var repeated = results[first]
            if repeated.status != 503 { repeated.duplicate = true }
            results[position] = repeated
        }
        return results
    }

    /// Counts the outcomes (metrics, the import's progress, a log line) and answers the batch:
    /// 200 with every item's outcome, 503 with `Retry-After` when Redis took none of them.
    func answerBatch(
        _ batch: BatchInput, results: [BatchItemResult], kind: BatchKind, app: AppRecord, logger: Logger, at: Date
    ) async -> Response {
        let key = batch.mediaType == "application/json" ? "index" : "line"
        let answers: [JSONValue] = zip(batch.items, results).map { item, result in
            var object = result.json
            object[key] = .number(Double(item.number))
            return .object(object)
        }
        var counts: [String: Int] = [:]
        for result in results { counts[result.category, default: 0] += 1 }
        metrics.importItems(counts)
        let unavailable = counts["unavailable", default: 0]
        await ingestion.intake.recordImport(
            batch.importID, appID: app.id,
            tally: ImportBatchTally(
                queued: counts["accepted", default: 0] + counts["fraud", default: 0], duplicates: counts["duplicate", default: 0],
                invalid: counts["invalid", default: 0]), at: at)
        logger.info(
            "Batch submitted",
            metadata: [
                "app.id": "\(app.id.canonical)", "import.id": "\(batch.importID.canonical)",
                "batch.kind": "\(kind == .receipts ? "receipts" : "transactions")", "batch.items": "\(batch.items.count)",
                "batch.unavailable": "\(unavailable)",
            ])
        var response = json(
            unavailable == results.count ? .serviceUnavailable : .ok,
            [
                "import_id": .string(batch.importID.canonical), "items": .array(answers),
                "counts": .object(counts.mapValues { .number(Double($0)) }),
            ])
        if unavailable > 0 { response.headers[.retryAfter] = "5" }
        return response
    }

    /// One item checked and made into its job like a single POST's (nothing written yet).
    func planBatchItem(_ bytes: [UInt8], kind: BatchKind, app: AppRecord, address: String?, at: Date) -> Result<PlannedJob, FieldErrors> {
        if let problem = InputHygiene.jsonProblem(bytes) { return .failure(FieldErrors([problem])) }
        guard let parsed = JSONValue.parseLeniently(bytes) else {
            return .failure(FieldErrors([FieldError(field: "body", reason: "must be valid JSON")]))
        }
        switch kind {
        case .receipts:
            let submit: SubmitReceiptRequest
            switch SubmitReceiptRequest.parse(parsed) {
            case .success(let value): submit = value
            case .failure(let failure): return .failure(failure)
            }
            var submission = submit.submission
            if submit.ipAddressOmitted { submission.ipAddress = address }
            return .success(
                ReceiptIngestion.plan(submit.receipt, submission: submission, app: app, origin: .api, authenticity: ingestion.authenticity, at: at))
        case .transactions:
            let submit: SubmitTransactionRequest
            switch SubmitTransactionRequest.parse(parsed) {
            case .success(let value): submit = value
            case .failure(let failure): return .failure(failure)
            }
            var submission = submit.submission
            if submit.ipAddressOmitted { submission.ipAddress = address }
            return ingestion.plan(transaction: submit, submission: submission, app: app, origin: .api, at: at).mapError { FieldErrors([$0]) }
        }
    }

    /// One planned item queued (into the import queue, without waiting for a worker).
    func queueBatchItem(_ job: PlannedJob, logger: Logger) async -> BatchItemResult {
        let resource: ReceiptResource
        let status: Int
        switch await ingestion.enqueue(job, waits: false, logger: logger) {
        case .validated(let found): (status, resource) = (200, found)
        case .queued(let found): (status, resource) = (206, found)
        case .fraud(let found): (status, resource) = (402, found)
        case .unavailable: return BatchItemResult(status: 503)
        }
        return BatchItemResult(
            status: status, id: resource.id, duplicate: resource.id != job.envelope.id, fraudReason: resource.fraudReason,
            validationStatus: resource.validationStatus.rawValue)
    }

    /// `body(0) … body(count - 1)`, at most ``batchParallelism`` at a time, in input order.
    static func concurrentMap<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) async -> T) async -> [T] {
        await withTaskGroup(of: (Int, T).self) { group in
            var results = [T?](repeating: nil, count: count)
            for position in 0..<count {
                if position >= batchParallelism, let (done, result) = await group.next() { results[done] = result }
                group.addTask { (position, await body(position)) }
            }
            for await (done, result) in group { results[done] = result }
            return results.map { $0! }
        }
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
