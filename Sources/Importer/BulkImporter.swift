import Curl
import Foundation
import ReceiptCore
import Synchronization

/// `receiptq import`: streams a file of receipts to the batch endpoint, a batch at a time, and
/// keeps a checkpoint so that an interrupted import (Ctrl-C, a crash, the API down for too long)
/// resumes where it stopped.
///
/// The promises it keeps:
/// - **Nothing twice.** The checkpoint records the last line whose batch the API answered; a
///   resumed import starts after it. A batch sent but not answered (a crash in between) is sent
///   again, and the API's idempotency answers its items as duplicates (a forgery stays fraud):
///   nothing is queued or stored twice.
/// - **Nothing missing.** Every line ends accepted, a duplicate, fraud (402) or rejected with its
///   line number in the rejects file; an item the API could not queue (503) is sent again with
///   its batch until it is, or the import stops with the checkpoint before it.
/// - **No receipt in its output.** Progress, summary and rejects name lines, never their content.
public final class BulkImporter {
    /// What one run is asked to do.
    public struct Settings: Sendable {
        public var input: String
        public var format: ImportFormat
        /// Receipts or StoreKit 2 transactions (the endpoint must be that kind's batch endpoint).
        public var kind: ImportKind
        /// The batch endpoint, e.g. `http://127.0.0.1:8080/client/itunes_connect/receipts/batch`.
        public var endpoint: String
        public var token: String
        public var batchSize: Int
        public var checkpointPath: String
        public var rejectsPath: String
        public var resume: Bool
        public var dryRun: Bool
        /// Seconds between progress lines when standard error is not a terminal.
        public var plainInterval: Double
        /// Whether the imported receipts' changes become events and webhooks (default: not).
        public var events: Bool

        /// Creates settings; the checkpoint and rejects files default to `<input>.import.json` and
        /// `<input>.rejects.ndjson` (in the current directory for standard input).
        public init(
            input: String, format: ImportFormat, endpoint: String, token: String, batchSize: Int = 500, checkpointPath: String? = nil,
            rejectsPath: String? = nil, resume: Bool = false, dryRun: Bool = false, plainInterval: Double = 5, events: Bool = false,
            kind: ImportKind = .receipts
        ) {
            self.kind = kind
            self.events = events
            self.input = input
            self.format = format
            self.endpoint = endpoint
            self.token = token
            self.batchSize = min(max(1, batchSize), 1_000)
            let base = input == "-" ? "stdin" : input
            self.checkpointPath = checkpointPath ?? "\(base).import.json"
            self.rejectsPath = rejectsPath ?? "\(base).rejects.ndjson"
            self.resume = resume
            self.dryRun = dryRun
            self.plainInterval = plainInterval
        }
    }

    /// What the import did, this run and before it (a resumed import adds to its checkpoint's).
    public struct Counts: Sendable, Codable, Equatable {
        public var accepted = 0
        public var duplicates = 0
        public var fraud = 0
        public var invalid = 0
        /// The lines sent or refused so far.
        public var lines: Int { accepted + duplicates + fraud + invalid }
    }

    /// Why an import stopped early.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// The checkpoint file: which import, which input, and the last line fully answered.
    struct Checkpoint: Codable {
        var version = 1
        var importID: UUID
        var input: String
        var inputBytes: Int64
        /// SHA-256 of the input's first 64 KiB: the same file, not another one of that name.
        var head: String
        var format: String
        var lastLine: Int
        var counts: Counts
        /// The rejects file's length when `lastLine` was reached: a resume cuts what a batch whose
        /// checkpoint was never written had listed, so no line is listed twice.
        var rejectsBytes: UInt64?

        enum CodingKeys: String, CodingKey {
            case version, input, format, counts
            case importID = "import_id"
            case inputBytes = "input_bytes"
            case head = "head_sha256"
            case lastLine = "last_line"
            case rejectsBytes = "rejects_bytes"
        }

        // By hand for the id's sake: `UUID` encodes upper-case, and every id receiptq prints is
        // canonical lower-case (RFC 9562). Reading takes either case.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(version, forKey: .version)
            try container.encode(importID.canonical, forKey: .importID)
            try container.encode(input, forKey: .input)
            try container.encode(inputBytes, forKey: .inputBytes)
            try container.encode(head, forKey: .head)
            try container.encode(format, forKey: .format)
            try container.encode(lastLine, forKey: .lastLine)
            try container.encode(counts, forKey: .counts)
            try container.encodeIfPresent(rejectsBytes, forKey: .rejectsBytes)
        }
    }

    public let settings: Settings
    let client: HTTPClient
    let progress: ImportProgress
    /// SHA-256 of some bytes, lower-case hex: the checkpoint's fingerprint of the input.
    let sha256Hex: @Sendable ([UInt8]) -> String
    private let interrupted = Atomic<Bool>(false)

    /// Creates the importer (nothing is read or sent yet).
    /// - Parameter sha256Hex: SHA-256 in lower-case hex. A port rather than a crypto import: the
    ///   importer is a service on ReceiptCore and Curl only; the app passes OpenSSL's digest.
    public init(settings: Settings, sha256Hex: @escaping @Sendable ([UInt8]) -> String, output: FileHandle = .standardError) throws {
        self.settings = settings
        self.sha256Hex = sha256Hex
        client = try HTTPClient(options: CurlOptions(), lanes: 2)
        progress = ImportProgress(output: output, plainInterval: settings.plainInterval)
    }

    /// Asks the import to stop after the batch in flight (its checkpoint written): Ctrl-C.
    public func interrupt() { interrupted.store(true, ordering: .relaxed) }

    /// Runs the import to the end of the input, or until interrupted.
    /// - Returns: the counts of the whole import, and whether it reached the end.
    public func run() async throws -> (counts: Counts, finished: Bool, importID: UUID) {
        let handle: FileHandle
        if settings.input == "-" {
            handle = .standardInput
        } else {
            guard let file = FileHandle(forReadingAtPath: settings.input) else { throw Failure(description: "cannot read \(settings.input)") }
            handle = file
        }
        let identity = try inputIdentity()
        var checkpoint: Checkpoint
        if settings.resume {
            guard let data = FileManager.default.contents(atPath: settings.checkpointPath),
                let saved = try? JSONDecoder().decode(Checkpoint.self, from: data)
            else { throw Failure(description: "--resume: no checkpoint at \(settings.checkpointPath)") }
            guard saved.input == settings.input, saved.inputBytes == identity.bytes, saved.head == identity.head,
                saved.format == settings.format.rawValue
            else { throw Failure(description: "--resume: \(settings.checkpointPath) belongs to another input or format") }
            checkpoint = saved
        } else {
            if FileManager.default.fileExists(atPath: settings.checkpointPath), !settings.dryRun {
                throw Failure(description: "\(settings.checkpointPath) exists: resume with --resume, or remove it to start over")
            }
            checkpoint = Checkpoint(
                importID: JobID.make(), input: settings.input, inputBytes: identity.bytes, head: identity.head, format: settings.format.rawValue,
                lastLine: 0, counts: Counts())
            _ = FileManager.default.createFile(atPath: settings.rejectsPath, contents: nil)
        }
        guard let rejects = FileHandle(forWritingAtPath: settings.rejectsPath) else {
            throw Failure(description: "cannot write \(settings.rejectsPath)")
        }
        defer { try? rejects.close() }
        if settings.resume, let length = checkpoint.rejectsBytes { try rejects.truncate(atOffset: length) }
        _ = try rejects.seekToEnd()

        let source = ImportSource(handle: handle, format: settings.format, kind: settings.kind)
        do {
            try source.skip(through: checkpoint.lastLine)
        } catch let rejection as ImportRejection {
            throw Failure(description: "\(rejection.field) \(rejection.reason)")
        }
        let total = settings.input == "-" ? nil : ImportSource.countLines(path: settings.input)
        progress.start(total: total, done: checkpoint.lastLine, counts: checkpoint.counts)

        while !interrupted.load(ordering: .relaxed) {
            // A batch: the next lines that can be sent, the refused ones written as rejects.
            var batch: [(line: Int, item: [UInt8])] = []
            var lastLine = checkpoint.lastLine
            do {
                while batch.count < settings.batchSize, let line = try source.next() {
                    lastLine = line.number
                    switch line.item {
                    case .success(let item): batch.append((line.number, item))
                    case .failure(let rejection):
                        checkpoint.counts.invalid += 1
                        try write(reject: line.number, status: 422, field: rejection.field, reason: rejection.reason, to: rejects)
                    }
                }
            } catch let rejection as ImportRejection {
                throw Failure(description: "\(rejection.field) \(rejection.reason)")
            }
            if batch.isEmpty, lastLine == checkpoint.lastLine { break }
            if !batch.isEmpty, !settings.dryRun {
                let counted = try await send(batch, importID: checkpoint.importID, rejects: rejects)
                checkpoint.counts.accepted += counted.accepted
                checkpoint.counts.duplicates += counted.duplicates
                checkpoint.counts.fraud += counted.fraud
                checkpoint.counts.invalid += counted.invalid
            } else if settings.dryRun {
                checkpoint.counts.accepted += batch.count
            }
            checkpoint.lastLine = lastLine
            checkpoint.rejectsBytes = try rejects.offset()
            if !settings.dryRun { try save(checkpoint) }
            progress.update(done: lastLine, counts: checkpoint.counts)
        }
        let finished = !interrupted.load(ordering: .relaxed)
        progress.finish()
        if finished, !settings.dryRun { try save(checkpoint) }
        return (checkpoint.counts, finished, checkpoint.importID)
    }

    /// Sends one batch until the API has answered every item (a 503 item, or the whole batch
    /// refused by a Redis outage, is sent again with backoff, for at most ~5 minutes).
    private func send(_ batch: [(line: Int, item: [UInt8])], importID: UUID, rejects: FileHandle) async throws -> Counts {
        var counts = Counts()
        var pending = batch
        var delay = 0.5
        var waited = 0.0
        while !pending.isEmpty {
            var body: [UInt8] = []
            for (_, item) in pending {
                body += item
                body.append(0x0A)
            }
            var unanswered: [(line: Int, item: [UInt8])] = []
            do {
                let response = try await client.send(
                    HTTPRequest(
                        method: "POST", url: settings.endpoint,
                        headers: [
                            (name: "Content-Type", value: "application/x-ndjson"), (name: "Authorization", value: "Bearer \(settings.token)"),
                            (name: BulkEndpoint.importIDHeader, value: importID.canonical),
                            (name: BulkEndpoint.importEventsHeader, value: settings.events ? "true" : "false"),
                        ], body: body))
                switch response.status {
                case 200:
                    guard let answer = try? JSONValue.parse(response.body), let items = answer["items"]?.arrayValue, items.count == pending.count
                    else { throw Failure(description: "the API answered the batch with something else than its items") }
                    for (sent, item) in zip(pending, items) {
                        switch item["status"]?.intValue ?? 0 {
                        case 503:
                            unanswered.append(sent)
                        case 402:
                            // Fraud even when the API has seen it before (a batch sent again after a
                            // crash): the rejects file lists the line as a 402 either way, and the
                            // summary must agree with it.
                            counts.fraud += 1
                            try write(
                                reject: sent.line, status: 402, field: "receipt", reason: item["fraud_reason"]?.stringValue ?? "fraud", to: rejects)
                        case 422:
                            counts.invalid += 1
                            let error = item["errors"]?.arrayValue?.first
                            try write(
                                reject: sent.line, status: 422, field: error?["field"]?.stringValue ?? "body",
                                reason: error?["reason"]?.stringValue ?? "refused", to: rejects)
                        case 200, 206:
                            if item["duplicate"] == .bool(true) { counts.duplicates += 1 } else { counts.accepted += 1 }
                        default:
                            throw Failure(description: "the API answered an item \(item["status"]?.intValue ?? 0)")
                        }
                    }
                case 503:
                    unanswered = pending
                case 401:
                    throw Failure(description: "the API refused the token (401)")
                default:
                    throw Failure(description: "the API answered the batch \(response.status)")
                }
            } catch let error as CurlError {
                progress.note("the API is unreachable (\(error.code)); trying again")
                unanswered = pending
            }
            pending = unanswered
            guard !pending.isEmpty else { break }
            guard waited < 300 else { throw Failure(description: "the API could not queue \(pending.count) items for 5 minutes; resume later") }
            try await Task.sleep(for: .seconds(delay))
            waited += delay
            delay = min(delay * 2, 30)
        }
        return counts
    }

    private func write(reject line: Int, status: Int, field: String, reason: String, to rejects: FileHandle) throws {
        var writer = JSONWriter()
        writer.openObject()
        writer.member("field", field)
        writer.member("line", line)
        writer.member("reason", reason)
        writer.member("status", status)
        writer.closeObject()
        try rejects.write(contentsOf: writer.bytes + [0x0A])
    }

    /// Written to a temporary file and renamed over the checkpoint: a crash leaves the old one or
    /// the new one, never half of either.
    private func save(_ checkpoint: Checkpoint) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data = try encoder.encode(checkpoint)
        let temporary = settings.checkpointPath + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: data) else {
            throw Failure(description: "cannot write \(temporary)")
        }
        guard rename(temporary, settings.checkpointPath) == 0 else { throw Failure(description: "cannot replace \(settings.checkpointPath)") }
    }

    /// The input's size and the digest of its head (empty for standard input).
    private func inputIdentity() throws -> (bytes: Int64, head: String) {
        guard settings.input != "-" else { return (0, "") }
        let attributes = try FileManager.default.attributesOfItem(atPath: settings.input)
        let size = (attributes[.size] as? NSNumber)?.int64Value ?? 0
        guard let handle = FileHandle(forReadingAtPath: settings.input) else { throw Failure(description: "cannot read \(settings.input)") }
        defer { try? handle.close() }
        let head = handle.readData(ofLength: 64 << 10)
        return (size, sha256Hex(Array(head)))
    }
}
