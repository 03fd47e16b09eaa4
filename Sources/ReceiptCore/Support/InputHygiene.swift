/// One reason a request was refused: the field and why (a 422 body lists them all).
public struct FieldError: Error, Sendable, Equatable, Codable {
    public var field: String
    public var reason: String

    /// Creates a field error.
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }
}

/// Every field error of one request.
public struct FieldErrors: Error, Sendable, Equatable {
    public var errors: [FieldError]
    /// Wraps a list of field errors.
    public init(_ errors: [FieldError]) { self.errors = errors }
}

/// The rules every string from outside passes before anything is queued, stored or looked up: it
/// must be text that Postgres can hold, so that a 2xx never promises what a worker cannot store.
///
/// Postgres `text` and `jsonb` refuse U+0000 (SQLSTATE 22021, 22P05), and nothing outside UTF-8
/// reaches a Swift `String` intact: an overlong form, an encoded surrogate (CESU-8) or a lone
/// `\uD800` escape would either fail later or be silently replaced. Each check names the field
/// (`user_identifier`, `metadata.tags[2]`, a query parameter's name) and never echoes the value.
///
/// Pure and allocation-light: the HTTP layer runs it on every request before any handler.
public enum InputHygiene {
    /// How deeply JSON may nest (the deepest document receiptq itself accepts is 3 levels).
    public static let maxJSONDepth = 32

    static let nulReason = "must not contain U+0000 (NUL)"
    static let utf8Reason = "must be valid UTF-8 (no overlong forms, surrogates or truncated sequences)"
    static let surrogateReason = "must not contain an unpaired UTF-16 surrogate escape"

    /// Why `text` cannot be stored, or nil when it can.
    public static func problem(in text: String) -> String? {
        text.utf8.contains(0) ? nulReason : nil
    }

    /// Why `bytes`, read as text, cannot be stored (not UTF-8, or a NUL), or nil when they can.
    public static func problem(utf8 bytes: some Collection<UInt8>) -> String? {
        guard String(validating: bytes, as: UTF8.self) != nil else { return utf8Reason }
        return bytes.contains(0) ? nulReason : nil
    }

    // MARK: Forms and query strings

    /// The first field of an `application/x-www-form-urlencoded` text (a query string or a form
    /// body) whose name or value, once percent-decoded, cannot be stored.
    ///
    /// - Parameter where: the field named when the parameter's own name is not printable (`query`, `form`).
    public static func formProblem(_ encoded: some Collection<UInt8>, where place: String) -> FieldError? {
        for pair in Array(encoded).split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let separator = pair.firstIndex(of: UInt8(ascii: "="))
            let name = percentDecoded(pair[pair.startIndex..<(separator ?? pair.endIndex)])
            let value = separator.map { percentDecoded(pair[pair.index(after: $0)...]) } ?? []
            let field = printableName(name) ?? place
            if let reason = problem(utf8: name) { return FieldError(field: field, reason: "parameter names \(reason)") }
            if let reason = problem(utf8: value) { return FieldError(field: field, reason: reason) }
        }
        return nil
    }

    /// The problem of a request path once percent-decoded (a path parameter such as `{id}`).
    public static func pathProblem(_ path: some Collection<UInt8>) -> FieldError? {
        problem(utf8: percentDecoded(path)).map { FieldError(field: "path", reason: $0) }
    }

    /// `%XX` decoded and `+` read as a space, as form decoders do; a malformed `%` stays as it is
    /// (it is the parser's business, and it cannot hide a NUL).
    static func percentDecoded(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "%"), index + 2 < input.count, let high = hexValue(input[index + 1]),
                let low = hexValue(input[index + 2])
            {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
        }
        return out
    }

    /// A name fit to appear in an error: short printable ASCII, else nil (never echo a hostile one).
    public static func printableName(_ bytes: [UInt8]) -> String? {
        guard !bytes.isEmpty, bytes.count <= 64, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
