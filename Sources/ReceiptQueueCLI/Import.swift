import ArgumentParser
import Foundation
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
        let summary = try await usage {
            try await ReceiptQueueApp.runImport(
                ReceiptQueueApp.ImportOptions(
                    input: input, format: format, app: app, token: token, api: api, batchSize: batchSize, checkpoint: checkpoint,
                    rejects: rejects, resume: resume, dryRun: dryRun, transactions: transactions, events: events))
        }
        print(
            """
            import \(summary.importID.canonical)\(dryRun ? " (dry run: nothing sent)" : ""): \(summary.finished ? "done" : "interrupted")
              \(dryRun ? "valid" : "accepted"): \(summary.accepted)
              duplicates: \(summary.duplicates)
              fraud: \(summary.fraud)
              invalid: \(summary.invalid)\(summary.invalid + summary.fraud > 0 ? " (line numbers in \(summary.rejectsPath))" : "")
            """)
        if !summary.finished {
            print(
                "resume with: receiptq import \(input) --resume\(summary.format == "ndjson" ? "" : " --format \(summary.format)")\(app.map { " --app \($0)" } ?? "")"
            )
            throw ExitCode(130)
        }
    }
}
