import Foundation

/// Arbitrary JSON, for client metadata that receiptq stores and returns without interpreting.
public enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The value at `key` when this is an object.
    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    /// The string, or the number rendered without a fractional part when it is integral.
    ///
    /// Apple sends most numbers as strings, but not always; this reads either.
    public var stringValue: String? {
        switch self {
        case .string(let value): return value
        case .number(let value) where value == value.rounded() && abs(value) < 1e17: return String(Int64(value))
        case .number(let value): return String(value)
        case .bool(let value): return value ? "true" : "false"
        default: return nil
        }
    }

    /// A boolean from `true`/`false`, `"true"`/`"false"`, `"1"`/`"0"` or `1`/`0`, the spellings Apple mixes.
    public var boolValue: Bool? {
        switch self {
        case .bool(let value): return value
        case .number(let value): return value != 0
        case .string(let value):
            switch value.lowercased() {
            case "true", "1": return true
            case "false", "0": return false
            default: return nil
            }
        default: return nil
        }
    }

    /// An integer from a number or a numeric string.
    public var intValue: Int? {
        switch self {
        case .number(let value): return Int(exactly: value.rounded()) ?? nil
        case .string(let value): return Int(value)
        default: return nil
        }
    }

    /// The elements when this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The members when this is an object.
    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// A JSON number of milliseconds since 1970 as a date; nil for anything else, text included
    /// (the strict reading of signed payloads and job envelopes, not Apple's lenient receipts).
    var millisecondsDate: Date? {
        guard case .number(let milliseconds) = self else { return nil }
        return Date(timeIntervalSince1970: milliseconds / 1000)
    }
}
