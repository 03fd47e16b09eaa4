import Foundation
import Hummingbird
import ReceiptCore

// The dashboard's job actions (retry and delete, by ids or by filter) and the URLs that carry a
// list's filter and an action's outcome back to the page.
extension AdminPages {
    func mutate<Context: AdminRequestContext>(
        _ kind: JobSetKind, retry: Bool, form: FormFields, user: Operator, context: Context
    ) async throws -> Response {
        let selection: Selection
        if form["all"] == "1" {
            var appID: UUID?
            if let text = form["app_id"], !text.isEmpty {
                guard let id = UUID(uuidString: text) else { return redirect(Self.returnURL(kind, form: form, done: "bad_app")) }
                appID = id
            }
            if !retry && form["confirm"] != "1" { return redirect(Self.returnURL(kind, form: form, done: "unconfirmed")) }
            selection = .all(JobSetFilter(errorCode: FailureCode(text: form["error_code"]), appID: appID, search: form["q"]))
        } else {
            let ids = form.all("id").compactMap(JobSetEntry.ID.init)
            guard !ids.isEmpty else { return redirect(Self.returnURL(kind, form: form, done: "none")) }
            selection = .ids(ids)
        }
        let moved = try await actions.apply(selection, to: store(kind), retry: retry, by: user, source: "dashboard", logger: context.logger)
        return redirect(Self.returnURL(kind, form: form, done: retry ? "retried" : "deleted", count: moved))
    }

    /// The list the operator came from (its filter travels in `return_*` fields), with the outcome.
    static func returnURL(_ kind: JobSetKind, form: FormFields, done: String, count: Int? = nil) -> String {
        var items = ["error_code", "app_id", "q"].compactMap { name -> URLQueryItem? in
            guard let value = form["return_\(name)"], !value.isEmpty else { return nil }
            return URLQueryItem(name: name, value: value)
        }
        items.append(URLQueryItem(name: "done", value: done))
        if let count { items.append(URLQueryItem(name: "count", value: String(count))) }
        var components = URLComponents()
        components.path = "/admin/\(path(kind))"
        components.queryItems = items
        return components.string ?? "/admin/\(path(kind))"
    }

    /// The message an action's redirect asks for: a fixed text, never one taken from the URL.
    static func notice(_ query: Parameters) -> (text: String, isProblem: Bool)? {
        let count = query.get("count").flatMap(Int.init) ?? 0
        let jobs = count == 1 ? "1 job" : "\(count) jobs"
        switch query.get("done") {
        case "retried": return ("\(jobs) sent back to the queue.", false)
        case "deleted": return ("\(jobs) deleted for good.", false)
        case "none": return ("Nothing was selected.", true)
        case "unconfirmed": return ("Nothing was deleted: tick “yes, for good” to delete every matching job.", true)
        case "bad_app": return ("The app filter is not an app id; nothing was changed.", true)
        default: return nil
        }
    }

    static func filterFields(_ filter: JobSetFilter) -> [[String: String]] {
        [("error_code", filter.errorCode?.rawValue), ("app_id", filter.appID?.uuidString.lowercased()), ("q", filter.search)].compactMap {
            name, value in
            value.map { ["name": name, "value": $0] }
        }
    }

    static func listURL(_ kind: JobSetKind, filter: JobSetFilter, offset: Int) -> String {
        var components = URLComponents()
        components.path = "/admin/\(path(kind))"
        components.queryItems =
            filterFields(filter).map { URLQueryItem(name: $0["name"]!, value: $0["value"]) } + [
                URLQueryItem(name: "offset", value: String(offset))
            ]
        return components.string ?? components.path
    }
}
