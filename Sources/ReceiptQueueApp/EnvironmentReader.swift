/// The environment variables a configuration component reads, with the rules every variable
/// follows: empty means unset, and a value that cannot be used is a ``ConfigurationError`` naming
/// the variable, never repeating its value (it may be a secret).
struct EnvironmentReader {
    let variables: [String: String]

    /// The variable's value; nil when it is unset or empty.
    subscript(_ key: String) -> String? {
        guard let value = variables[key], !value.isEmpty else { return nil }
        return value
    }

    /// Whether the variable is set to something.
    func isSet(_ key: String) -> Bool { self[key] != nil }

    func string(_ key: String, _ fallback: String) -> String { self[key] ?? fallback }

    func int(_ key: String, _ fallback: Int, range: ClosedRange<Int> = 0...Int.max) throws -> Int {
        guard let text = self[key] else { return fallback }
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError(variable: key, reason: "must be an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    func double(_ key: String, _ fallback: Double, range: ClosedRange<Double>) throws -> Double {
        guard let text = self[key] else { return fallback }
        // `Double("nan")` parses, and NaN is in no range, so this also refuses it.
        guard let value = Double(text), range.contains(value) else {
            throw ConfigurationError(variable: key, reason: "must be a decimal number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// `true` or `false`, any case.
    func bool(_ key: String, _ fallback: Bool) throws -> Bool {
        guard let value = Bool(string(key, fallback ? "true" : "false").lowercased()) else {
            throw ConfigurationError(variable: key, reason: "must be true or false")
        }
        return value
    }

    /// One of a fixed set of names (case-insensitive); the error lists them, never the value.
    func choice<Value: RawRepresentable & CaseIterable>(_ key: String, _ fallback: Value) throws -> Value where Value.RawValue == String {
        guard let text = self[key] else { return fallback }
        guard let value = Value(rawValue: text.lowercased()) else {
            throw ConfigurationError(variable: key, reason: "must be one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    /// A secret of at least `minimumLength` UTF-8 bytes, or nil when unset.
    func secret(_ key: String, minimumLength: Int) throws -> String? {
        guard let value = self[key] else { return nil }
        guard value.utf8.count >= minimumLength else {
            throw ConfigurationError(variable: key, reason: "must be at least \(minimumLength) characters")
        }
        return value
    }
}
