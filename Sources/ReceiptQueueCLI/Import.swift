import ArgumentParser
import Dispatch
import Foundation
import Importer
import Libpq
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp

/// `receiptq import FILE|-`: a history of receipts into receiptq through the batch endpoint.
struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Imports existing receipts (a file, or - for standard input) through the API's batch endpoint.",
        discussion: """
            Each receipt is checked and queued as a POST would be, into the import queue, which workers serve with \
            their spare capacity. A checkpoint (FILE.import.json) lets Ctrl-C or a crash be resumed with --resume; \
            refused lines are listed by number in FILE.rejects.ndjson. Formats: ndjson (one request body per line), \
            csv (a header with receipt and any of user_identifier, country_code, identifier_for_vendor, ip_address), \
            lines (one base64 receipt per line). With --transactions the lines are StoreKit 2 purchases instead: \
            ndjson bodies of POST /client/transactions, csv with signed_transaction or transaction_id (and environment), \
            lines of transaction ids or signed transactions.
            """)

    @Argument(help: "The file to import, or - for standard input.") var input: String
    @Option(help: "ndjson, csv or lines (default: from the file's extension, else ndjson).") var format: String?
    @Option(help: "The app whose receipts these are: a token is issued for the import and revoked at its end.") var app: String?
    @Option(help: "An API token of the app instead of --app (or set RECEIPTQ_API_TOKEN).") var token: String?
    @Option(help: "The API's base URL (default: http://HTTP_HOST:HTTP_PORT).") var api: String?
    @Option(help: "Receipts per batch, 1–1000.") var batchSize = 500
    @Option(help: "The checkpoint file (default: FILE.import.json).") var checkpoint: String?
    @Option(help: "Where refused lines are listed (default: FILE.rejects.ndjson).") var rejects: String?
    @Flag(help: "Go on from the checkpoint of an interrupted import.") var resume = false
    @Flag(help: "Read and check the file only; send nothing.") var dryRun = false
    @Flag(help: "The lines are StoreKit 2 transactions (signed, or ids), sent to /client/transactions/batch.") var transactions = false
    @Flag(help: "Emit events and webhooks for the imported receipts' changes, as for live ones (default: none).") var events = false

    func run() async throws {
        // Logging is set up once per process, by appsConnection() when the token is issued here.
        let configuration = try AppConfiguration()
        let format = try resolvedFormat()
        let host = configuration.httpHost == "0.0.0.0" || configuration.httpHost == "::" ? "127.0.0.1" : configuration.httpHost
        let base = (api ?? "http://\(host):\(configuration.httpPort)").trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        // The token: given, or issued for this import under --app and revoked when it ends.
        var apiToken = token ?? ProcessInfo.processInfo.environment["RECEIPTQ_API_TOKEN"]
        var issued: (connection: PostgresConnection, app: UUID, token: String)?
        if apiToken == nil, !dryRun {
            guard let app else { throw ValidationError("name the app (--app NAME) or give its API token (--token, RECEIPTQ_API_TOKEN)") }
            let connection = try appsConnection()
            do {
                let record = try AppAdmin(connection: connection).requiredApp(named: app)
                let minted = try AppAdmin(connection: connection).rotateToken(appID: record.id, revokingOthers: false)
                issued = (connection, record.id, minted)
                apiToken = minted
            } catch {
                connection.close()
                throw error
            }
        }
        defer {
            if let issued {
                _ = try? AppAdmin(connection: issued.connection).revokeToken(appID: issued.app, prefix: issued.token)
                issued.connection.close()
            }
        }
        let importer = try BulkImporter(
            settings: BulkImporter.Settings(
                input: input, format: format, endpoint: base + (transactions ? ImportKind.transactions : .receipts).path, token: apiToken ?? "",
                batchSize: batchSize, checkpointPath: checkpoint, rejectsPath: rejects, resume: resume, dryRun: dryRun, events: events,
                kind: transactions ? .transactions : .receipts), sha256Hex: { Digest.hex(Digest.sha256($0)) })
        // Ctrl-C (or SIGTERM): the batch in flight is answered and checkpointed, then the import stops.
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let sources = [SIGINT, SIGTERM].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                FileHandle.standardError.write(Data("\nimport: stopping after the batch in flight (again to quit at once)\n".utf8))
                importer.interrupt()
                signal(number, SIG_DFL)
            }
            source.resume()
            return source
        }
        defer { for source in sources { source.cancel() } }

        let outcome: (counts: BulkImporter.Counts, finished: Bool, importID: UUID)
        do {
            outcome = try await importer.run()
        } catch let failure as BulkImporter.Failure {
            throw ValidationError(failure.description)
        }
        let counts = outcome.counts
        print(
            """
            import \(outcome.importID.canonical)\(dryRun ? " (dry run: nothing sent)" : ""): \(outcome.finished ? "done" : "interrupted")
              \(dryRun ? "valid" : "accepted"): \(counts.accepted)
              duplicates: \(counts.duplicates)
              fraud: \(counts.fraud)
              invalid: \(counts.invalid)\(counts.invalid + counts.fraud > 0 ? " (line numbers in \(importer.settings.rejectsPath))" : "")
            """)
        if !outcome.finished {
            print(
                "resume with: receiptq import \(input) --resume\(format == .ndjson ? "" : " --format \(format.rawValue)")\(app.map { " --app \($0)" } ?? "")"
            )
            throw ExitCode(130)
        }
    }

    private func resolvedFormat() throws -> ImportFormat {
        if let format {
            guard let known = ImportFormat(rawValue: format.lowercased()) else {
                throw ValidationError("--format must be one of \(ImportFormat.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return known
        }
        let lowered = input.lowercased()
        if lowered.hasSuffix(".csv") { return .csv }
        if lowered.hasSuffix(".txt") || lowered.hasSuffix(".b64") { return .lines }
        return .ndjson
    }
}
