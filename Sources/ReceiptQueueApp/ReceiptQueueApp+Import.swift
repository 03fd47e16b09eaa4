import Dispatch
import Foundation
import Importer
import OpenSSL
import ReceiptCore

extension ReceiptQueueApp {
    /// What `receiptq import` is asked to do (its options, unchecked).
    public struct ImportOptions: Sendable {
        /// The file to import, or `-` for standard input.
        public var input: String
        /// `ndjson`, `csv` or `lines`; nil: from the file's extension, else ndjson.
        public var format: String?
        /// The app whose receipts these are: a token is issued for the import and revoked at its end.
        public var app: String?
        /// An API token of the app instead of `app` (else `RECEIPTQ_API_TOKEN`).
        public var token: String?
        /// The API's base URL (default: `http://HTTP_HOST:HTTP_PORT`).
        public var api: String?
        /// Receipts per batch (1–1000).
        public var batchSize: Int
        /// The checkpoint file (nil: `<input>.import.json`).
        public var checkpoint: String?
        /// Where refused lines are listed (nil: `<input>.rejects.ndjson`).
        public var rejects: String?
        /// Go on from the checkpoint of an interrupted import.
        public var resume: Bool
        /// Read and check the input only; send nothing.
        public var dryRun: Bool
        /// StoreKit 2 transactions instead of receipts.
        public var transactions: Bool
        /// Emit events and webhooks for the imported receipts' changes.
        public var events: Bool

        /// Options as the command line gave them.
        public init(
            input: String, format: String?, app: String?, token: String?, api: String?, batchSize: Int, checkpoint: String?,
            rejects: String?, resume: Bool, dryRun: Bool, transactions: Bool, events: Bool
        ) {
            self.input = input
            self.format = format
            self.app = app
            self.token = token
            self.api = api
            self.batchSize = batchSize
            self.checkpoint = checkpoint
            self.rejects = rejects
            self.resume = resume
            self.dryRun = dryRun
            self.transactions = transactions
            self.events = events
        }
    }

    /// What an import did, the whole import counted (a resumed one adds to its checkpoint's).
    public struct ImportSummary: Sendable {
        /// The import's id (the API files its batches under it).
        public var importID: UUID
        /// False when it was interrupted (Ctrl-C) before the end of its input.
        public var finished: Bool
        /// Lines queued (a dry run: lines that would be).
        public var accepted: Int
        /// Lines the API had seen before (answered with the earlier receipt).
        public var duplicates: Int
        /// Lines refused as forged (402).
        public var fraud: Int
        /// Lines refused as malformed (422), before sending or by the API.
        public var invalid: Int
        /// Where refused lines are listed.
        public var rejectsPath: String
        /// The format read (`ndjson`, `csv`, `lines`).
        public var format: String
    }

    /// `receiptq import`: streams the input to the API's batch endpoint, with a checkpoint; Ctrl-C
    /// (or SIGTERM) stops it after the batch in flight.
    /// - Throws: ``UsageError`` for options that cannot work or an import that cannot go on.
    public static func runImport(_ options: ImportOptions) async throws -> ImportSummary {
        // Logging is set up once per process, by the token's admin connection when one is issued here.
        let configuration = try AppConfiguration()
        let format = try importFormat(options)
        let host = configuration.api.host == "0.0.0.0" || configuration.api.host == "::" ? "127.0.0.1" : configuration.api.host
        let base = (options.api ?? "http://\(host):\(configuration.api.port)").trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        // The token: given, or issued for this import under --app and revoked when it ends.
        var apiToken = options.token ?? ProcessInfo.processInfo.environment["RECEIPTQ_API_TOKEN"]
        var issued: (admin: Admin, app: UUID, token: String)?
        if apiToken == nil, !options.dryRun {
            guard let app = options.app else {
                throw UsageError("name the app (--app NAME) or give its API token (--token, RECEIPTQ_API_TOKEN)")
            }
            let admin = try Runtime.bootstrap(label: "apps").admin(label: "apps")
            do {
                guard let record = try admin.app(named: app) else { throw UsageError("no app named \(app)") }
                let minted = try admin.rotateToken(appID: record.id, revokingOthers: false, audit: .commandLine("import.token_issue"))
                issued = (admin, record.id, minted)
                apiToken = minted
            } catch {
                admin.close()
                throw error
            }
        }
        defer {
            if let issued {
                _ = try? issued.admin.revokeToken(appID: issued.app, prefix: issued.token, audit: .commandLine("import.token_revoke"))
                issued.admin.close()
            }
        }
        let kind: ImportKind = options.transactions ? .transactions : .receipts
        let importer = try BulkImporter(
            settings: BulkImporter.Settings(
                input: options.input, format: format, endpoint: base + kind.path, token: apiToken ?? "", batchSize: options.batchSize,
                checkpointPath: options.checkpoint, rejectsPath: options.rejects, resume: options.resume, dryRun: options.dryRun,
                events: options.events, kind: kind),
            sha256Hex: { Digest.hex(Digest.sha256($0)) })
        let sources = interruptOnSignals(importer)
        defer { for source in sources { source.cancel() } }
        let outcome: (counts: BulkImporter.Counts, finished: Bool, importID: UUID)
        do {
            outcome = try await importer.run()
        } catch let failure as BulkImporter.Failure {
            throw UsageError(failure.description)
        }
        let counts = outcome.counts
        return ImportSummary(
            importID: outcome.importID, finished: outcome.finished, accepted: counts.accepted, duplicates: counts.duplicates,
            fraud: counts.fraud, invalid: counts.invalid, rejectsPath: importer.settings.rejectsPath, format: format.rawValue)
    }

    /// Ctrl-C (or SIGTERM): the batch in flight is answered and checkpointed, then the import
    /// stops; a second signal quits at once.
    private static func interruptOnSignals(_ importer: BulkImporter) -> [any DispatchSourceSignal] {
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        return [SIGINT, SIGTERM].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                FileHandle.standardError.write(Data("\nimport: stopping after the batch in flight (again to quit at once)\n".utf8))
                importer.interrupt()
                signal(number, SIG_DFL)
            }
            source.resume()
            return source
        }
    }

    /// `--format`, or the one the input's extension suggests (ndjson when it suggests none).
    private static func importFormat(_ options: ImportOptions) throws -> ImportFormat {
        if let format = options.format {
            guard let known = ImportFormat(rawValue: format.lowercased()) else {
                throw UsageError("--format must be one of \(ImportFormat.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return known
        }
        let lowered = options.input.lowercased()
        if lowered.hasSuffix(".csv") { return .csv }
        if lowered.hasSuffix(".txt") || lowered.hasSuffix(".b64") { return .lines }
        return .ndjson
    }
}
