import Curl
import Foundation
import ReceiptCore

/// The admin API of a running `serve` over HTTP, with the dashboard's credentials from the
/// environment (`DASHBOARD_USERNAME`, `DASHBOARD_PASSWORD`): what `receiptq dlq` calls.
public struct AdminAPIClient {
    let base: String
    let client: HTTPClient
    let authorization: String

    /// A client of the admin API under `base` (e.g. `http://127.0.0.1:8080`).
    public init(base: String) throws {
        self.base = base
        client = try HTTPClient(options: CurlOptions(), lanes: 1)
        let environment = ProcessInfo.processInfo.environment
        let user = environment["DASHBOARD_USERNAME"].flatMap { $0.isEmpty ? nil : $0 } ?? "admin"
        // The development default, as the server has it; production sets its own.
        let password = environment["DASHBOARD_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 } ?? "receiptq-dev"
        authorization = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// The admin API's base URL: `url`, else `RECEIPTQ_ADMIN_URL`, else `http://HTTP_HOST:HTTP_PORT`.
    public static func base(_ url: String?) throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let url = url ?? environment["RECEIPTQ_ADMIN_URL"], !url.isEmpty { return url.hasSuffix("/") ? String(url.dropLast()) : url }
        let configuration = try AppConfiguration()
        return "http://\(configuration.api.host):\(configuration.api.port)"
    }

    /// GETs `path`; returns the answer parsed and as it came.
    /// - Throws: ``UsageError`` for credentials refused, not found, or any other status than 200.
    public func get(_ path: String) async throws -> (value: JSONValue, bytes: [UInt8]) {
        try await send(HTTPRequest(method: "GET", url: base + path, headers: [(name: "Authorization", value: authorization)], body: []))
    }

    /// POSTs `body` as JSON to `path`; returns the answer parsed and as it came.
    /// - Throws: ``UsageError`` for credentials refused, not found, or any other status than 200.
    public func post(_ path: String, _ body: JSONValue) async throws -> (value: JSONValue, bytes: [UInt8]) {
        try await send(
            HTTPRequest(
                method: "POST", url: base + path,
                headers: [(name: "Authorization", value: authorization), (name: "Content-Type", value: "application/json")],
                body: Array(try JSONEncoder().encode(body))))
    }

    private func send(_ request: HTTPRequest) async throws -> (value: JSONValue, bytes: [UInt8]) {
        let response = try await client.send(request)
        let value = (try? JSONDecoder().decode(JSONValue.self, from: Data(response.body))) ?? .null
        switch response.status {
        case 200: return (value, response.body)
        case 401: throw UsageError("the admin API refused the credentials (DASHBOARD_USERNAME, DASHBOARD_PASSWORD)")
        case 404: throw UsageError("not found")
        default:
            let reason = value["errors"]?.arrayValue?.first.map { "\($0["field"]?.stringValue ?? ""): \($0["reason"]?.stringValue ?? "")" }
            throw UsageError("the admin API answered \(response.status)\(reason.map { " (\($0))" } ?? "")")
        }
    }
}
