import Foundation
import Hummingbird
import ReceiptCore

/// The refund defence's door: `PUT /client/users/{user_identifier}/consumption` with what only
/// the app knows of a user (`consented`, `delivery_status`, `consumption_percentage`,
/// `sample_content_provided`, `play_time_seconds`), stored for the answer to Apple's next
/// `CONSUMPTION_REQUEST` about one of the user's purchases. 200 with what is stored; 422 naming
/// the field (an unknown member included).
extension IngestAPI {
    func addConsumptionRoutes(to router: Router<IngestRequestContext>, log: any CustomerConsumptionLog) {
        router.put("/client/users/{user_identifier}/consumption") { request, context in
            try await postConsumption(request, context: context, log: log)
        }
    }

    func postConsumption(_ request: Request, context: IngestRequestContext, log: any CustomerConsumptionLog) async throws -> Response {
        let (app, parsed): (AppRecord, JSONValue)
        switch try await jsonSubmission(request, context: context) {
        case .success(let found): (app, parsed) = found
        case .failure(let refusal): return refusal.response
        }
        // The router hands the segment over as sent: `a%20b` is the user `a b`.
        let user: String
        switch Self.userIdentifier(context.parameters.get("user_identifier")?.removingPercentEncoding) {
        case .success(let value): user = value
        case .failure(let refusal): return unprocessable([refusal])
        }
        let statement: CustomerConsumption
        switch CustomerConsumptionRequest.parse(parsed) {
        case .success(let value): statement = value
        case .failure(let failure): return refused(failure.errors, app: app, logger: context.logger)
        }
        do {
            try await log.record(statement, appID: app.id, userIdentifier: user)
        } catch {
            return lookupFailed(error, field: "user_identifier", logger: context.logger)
        }
        return json(.ok, CustomerConsumptionRequest.body(statement, userIdentifier: user))
    }
}

/// The body of `PUT /client/users/{user_identifier}/consumption`, checked.
public enum CustomerConsumptionRequest {
    static let members: Set<String> = [
        "consented", "delivery_status", "consumption_percentage", "sample_content_provided", "play_time_seconds",
    ]

    /// Validates a parsed JSON body.
    /// - Returns: the statement, or every field error found.
    public static func parse(_ body: JSONValue) -> Result<CustomerConsumption, FieldErrors> {
        guard let object = body.objectValue else { return .failure(FieldErrors([FieldError(field: "body", reason: "must be a JSON object")])) }
        var errors = object.keys.filter { !members.contains($0) }.sorted().map { FieldError(field: $0, reason: "is not a known member") }
        var statement = CustomerConsumption(consented: false)
        switch object["consented"] {
        case .bool(let flag)?: statement.consented = flag
        case nil: errors.append(FieldError(field: "consented", reason: "is required"))
        default: errors.append(FieldError(field: "consented", reason: "must be true or false"))
        }
        switch object["delivery_status"] {
        case nil, .null?: break
        case .string(let text)? where ConsumptionDeliveryStatus(rawValue: text) != nil:
            statement.deliveryStatus = ConsumptionDeliveryStatus(rawValue: text)
        default:
            errors.append(
                FieldError(
                    field: "delivery_status", reason: "must be one of \(ConsumptionDeliveryStatus.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        switch object["consumption_percentage"] {
        case nil, .null?: break
        case let value? where wholeNumber(value).map({ (0...CustomerConsumption.fullConsumption).contains($0) }) == true:
            statement.consumptionPercentage = wholeNumber(value)
        default: errors.append(FieldError(field: "consumption_percentage", reason: "must be an integer from 0 to 100000 (milli-percent)"))
        }
        switch object["sample_content_provided"] {
        case nil, .null?: break
        case .bool(let flag)?: statement.sampleContentProvided = flag
        default: errors.append(FieldError(field: "sample_content_provided", reason: "must be true or false"))
        }
        switch object["play_time_seconds"] {
        case nil, .null?: break
        case let value? where (wholeNumber(value) ?? -1) >= 0: statement.playTimeSeconds = wholeNumber(value).map(Int64.init)
        default: errors.append(FieldError(field: "play_time_seconds", reason: "must be a whole number of seconds, 0 or more"))
        }
        return errors.isEmpty ? .success(statement) : .failure(FieldErrors(errors))
    }

    /// A JSON number that is a whole number (not `2.5`, not a string: `intValue` reads both).
    static func wholeNumber(_ value: JSONValue) -> Int? {
        guard case .number(let number) = value, number.rounded() == number, abs(number) <= 9_007_199_254_740_992 else { return nil }
        return Int(number)
    }

    /// The answer: what is stored.
    static func body(_ statement: CustomerConsumption, userIdentifier: String) -> [String: JSONValue] {
        [
            "user_identifier": .string(userIdentifier), "consented": .bool(statement.consented),
            "sample_content_provided": .bool(statement.sampleContentProvided),
            "delivery_status": statement.deliveryStatus.map { .string($0.rawValue) } ?? .null,
            "consumption_percentage": statement.consumptionPercentage.map { .number(Double($0)) } ?? .null,
            "play_time_seconds": statement.playTimeSeconds.map { .number(Double($0)) } ?? .null,
        ]
    }
}
