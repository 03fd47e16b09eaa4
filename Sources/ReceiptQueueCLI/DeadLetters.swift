import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

/// `receiptq dlq`: the dead letters (and retries) from the shell, through the admin API of a
/// running `serve`, with the dashboard's credentials (`DASHBOARD_USERNAME`, `DASHBOARD_PASSWORD`).
struct DeadLetterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dlq", abstract: "Lists, shows, retries and deletes dead letters (or retries) through the admin API.",
        subcommands: [List.self, Show.self, Retry.self, Delete.self])

    /// Where the admin API is and which set to act on.
    struct Target: ParsableArguments {
        @Option(help: "The admin API's base URL (default: RECEIPTQ_ADMIN_URL, else http://HTTP_HOST:HTTP_PORT).")
        var url: String?
        @Flag(help: "Act on the jobs waiting in backoff instead of the dead letters.")
        var retries = false

        var set: String { retries ? "retries" : "dead" }

        func base() throws -> String { try AdminAPIClient.base(url) }
    }

    /// Which entries: an error code, an app (name or id), a substring.
    struct Filter: ParsableArguments {
        @Option(help: "Only this error code (e.g. shared_secret_mismatch).") var errorCode: String?
        @Option(help: "Only this app (its name or id).") var app: String?
        @Option(help: "A substring of the id, bundle id, error or user identifier.") var search: String?

        func appID() throws -> UUID? {
            guard let app else { return nil }
            if let id = UUID(uuidString: app) { return id }
            let admin = try ReceiptQueueApp.Admin(try AppConfiguration(), label: "dlq")
            defer { admin.close() }
            return try admin.requiredApp(named: app).id
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists entries, newest dead letter (or soonest retry) first.")
        @OptionGroup var target: Target
        @OptionGroup var filter: Filter
        @Option(help: "How many entries (at most 500).") var limit = 50
        @Option(help: "How many matching entries to skip.") var offset = 0
        @Flag(help: "Print the API's JSON instead of a table.") var json = false

        func run() async throws {
            var query = ["limit=\(limit)", "offset=\(offset)"]
            if let code = filter.errorCode { query.append("error_code=\(escape(code))") }
            if let app = try filter.appID() { query.append("app_id=\(app.uuidString.lowercased())") }
            if let search = filter.search { query.append("q=\(escape(search))") }
            let page = try await usage {
                try await AdminAPIClient(base: try target.base()).get("/admin/api/\(target.set)?\(query.joined(separator: "&"))")
            }
            if json { return print(String(decoding: page.bytes, as: UTF8.self)) }
            let entries = page.value["entries"]?.arrayValue ?? []
            let when = target.retries ? "runs_at" : "died_at"
            print(
                "ID                                    KIND      BUNDLE ID                       ERROR                     TRIES  \(target.retries ? "RUNS AT" : "DIED AT")"
            )
            for entry in entries {
                func cell(_ key: String, _ width: Int) -> String {
                    String((entry[key]?.stringValue ?? "-").prefix(width)).padding(toLength: width, withPad: " ", startingAt: 0)
                }
                print(
                    "\(cell("id", 37)) \(cell("kind", 9)) \(cell("bundle_id", 31)) \(cell("error_code", 25)) "
                        + "\(cell("attempts", 6)) \(entry[when]?["utc"]?.stringValue ?? "-")")
            }
            let total = page.value["total_matching"]?.intValue ?? entries.count
            let exact = page.value["total_is_exact"]?.boolValue ?? true
            print("\(entries.count) shown of \(exact ? "" : "at least ")\(total) matching")
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Shows one entry: its envelope (receipt not shown) and every call to Apple.")
        @OptionGroup var target: Target
        @Argument(help: "The job id (or poison-… id).") var id: String

        func run() async throws {
            guard let id = JobSetEntry.ID(id) else { throw ValidationError("not a job id: \(id)") }
            let entry = try await usage { try await AdminAPIClient(base: try target.base()).get("/admin/api/\(target.set)/\(id.rawValue)") }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(entry.value), as: UTF8.self))
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Requeues entries with a fresh retry budget: given ids to the front, --all matching to the back.")
        @OptionGroup var target: Target
        @OptionGroup var filter: Filter
        @Flag(help: "Every entry matching the filter (all of them without one).") var all = false
        @Argument(help: "Job ids.") var ids: [String] = []

        func run() async throws { try await act("retry", reporting: "retried", target: target, filter: filter, all: all, ids: ids) }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Deletes entries: given ids, or --all matching the filter.")
        @OptionGroup var target: Target
        @OptionGroup var filter: Filter
        @Flag(help: "Every entry matching the filter (all of them without one).") var all = false
        @Argument(help: "Job ids.") var ids: [String] = []

        func run() async throws { try await act("delete", reporting: "deleted", target: target, filter: filter, all: all, ids: ids) }
    }
}

/// Posts a retry or delete and prints how many entries it moved ("Retried 3.").
private func act(
    _ action: String, reporting key: String, target: DeadLetterCommand.Target, filter: DeadLetterCommand.Filter, all: Bool, ids: [String]
) async throws {
    let client = try AdminAPIClient(base: try target.base())
    let body = try selection(ids: ids, all: all, filter: filter)
    let answer = try await usage { try await client.post("/admin/api/\(target.set)/\(action)", body) }
    print("\(key.prefix(1).uppercased())\(key.dropFirst()) \(answer.value[key]?.intValue ?? 0).")
}

/// The body of a retry or delete: ids, or `all` with the filter.
private func selection(ids: [String], all: Bool, filter: DeadLetterCommand.Filter) throws -> JSONValue {
    guard all != !ids.isEmpty else { throw ValidationError("give job ids, or --all (with an optional filter), not both") }
    if !ids.isEmpty {
        for id in ids where JobSetEntry.ID(id) == nil { throw ValidationError("not a job id: \(id)") }
        return .object(["ids": .array(ids.map(JSONValue.string))])
    }
    var body: [String: JSONValue] = ["all": .bool(true)]
    if let code = filter.errorCode { body["error_code"] = .string(code) }
    if let app = try filter.appID() { body["app_id"] = .string(app.uuidString.lowercased()) }
    if let search = filter.search { body["q"] = .string(search) }
    return .object(body)
}

private func escape(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "" }
