extension InputHygiene {
    /// The first string of a JSON text (a key or a value, at any depth) that cannot be stored, or
    /// the first container nested deeper than ``maxJSONDepth``; nil when there is none.
    ///
    /// One pass over the bytes, before any parser: Foundation's decoder turns `\u0000` into a NUL
    /// that Postgres later refuses, and answers a lone `\uD800` with an error that names no field.
    /// Malformed JSON is not this check's business (the handler's parser refuses it); whatever this
    /// check reports is refused either way.
    ///
    /// The field is a path from the body's root: `user_identifier`, `metadata.tags[2]`.
    public static func jsonProblem(_ bytes: some Collection<UInt8>) -> FieldError? {
        var scanner = JSONHygieneScanner(Array(bytes))
        return scanner.run()
    }
}

/// The walk behind ``InputHygiene/jsonProblem(_:)``: tracks the path of containers and keys, and
/// checks each string's raw bytes as UTF-8 and its `\u` escapes.
private struct JSONHygieneScanner {
    private enum Frame {
        /// An object, with the key whose value comes next (nil until one is read).
        case object(key: String?, expectingKey: Bool)
        case array(index: Int)
    }

    private let bytes: [UInt8]
    private var index = 0
    private var stack: [Frame] = []

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func run() -> FieldError? {
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                if let problem = string() { return problem }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                guard stack.count < InputHygiene.maxJSONDepth else {
                    return FieldError(field: path(), reason: "must not nest more than \(InputHygiene.maxJSONDepth) levels deep")
                }
                stack.append(byte == UInt8(ascii: "{") ? .object(key: nil, expectingKey: true) : .array(index: 0))
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                _ = stack.popLast()
                index += 1
            case UInt8(ascii: ","):
                switch stack.last {
                case .object(let key, _)?: stack[stack.count - 1] = .object(key: key, expectingKey: true)
                case .array(let position)?: stack[stack.count - 1] = .array(index: position + 1)
                case nil: break
                }
                index += 1
            case 0:
                return FieldError(field: path(), reason: InputHygiene.nulReason)
            default:
                index += 1
            }
        }
        return nil
    }

    /// Reads the string that starts at `index` (a quote), leaving `index` after its closing quote.
    private mutating func string() -> FieldError? {
        let start = index + 1
        // Most strings (a receipt's kilobytes of base64 above all) are printable ASCII without an
        // escape: nothing in them can be a problem, and they are read once, here.
        let (end, plain) = bytes.withUnsafeBufferPointer { bytes -> (Int, Bool) in
            var end = start
            var plain = true
            while end < bytes.count {
                let byte = bytes[end]
                if byte == UInt8(ascii: "\"") { break }
                if byte == UInt8(ascii: "\\") {
                    plain = false
                    end += 2
                } else {
                    if byte < 0x20 || byte >= 0x7F { plain = false }
                    end += 1
                }
            }
            return (end, plain)
        }
        let raw = bytes[start..<min(end, bytes.count)]
        index = end + 1
        let isKey: Bool
        if case .object(_, true)? = stack.last { isKey = true } else { isKey = false }
        let problem = plain ? nil : Self.problem(raw)
        if isKey {
            if let problem { return FieldError(field: path(), reason: "keys \(problem)") }
            stack[stack.count - 1] = .object(key: Self.keyText(raw), expectingKey: false)
            return nil
        }
        return problem.map { FieldError(field: path(), reason: $0) }
    }

    /// Why a string's raw bytes (between its quotes) cannot be stored.
    private static func problem(_ raw: ArraySlice<UInt8>) -> String? {
        if let reason = InputHygiene.problem(utf8: raw) { return reason }
        var position = raw.startIndex
        while position < raw.endIndex {
            guard raw[position] == UInt8(ascii: "\\"), position + 1 < raw.endIndex else {
                position += 1
                continue
            }
            guard raw[position + 1] == UInt8(ascii: "u") else {
                position += 2
                continue
            }
            guard let unit = hex4(raw, at: position + 2) else { return nil }  // malformed: the parser's to refuse
            position += 6
            switch unit {
            case 0:
                return InputHygiene.nulReason
            case 0xD800...0xDBFF:
                // A high surrogate stands only right before a low one.
                guard position + 1 < raw.endIndex, raw[position] == UInt8(ascii: "\\"), raw[position + 1] == UInt8(ascii: "u"),
                    let low = hex4(raw, at: position + 2), (0xDC00...0xDFFF).contains(low)
                else { return InputHygiene.surrogateReason }
                position += 6
            case 0xDC00...0xDFFF:
                return InputHygiene.surrogateReason
            default:
                break
            }
        }
        return nil
    }

    private static func hex4(_ raw: ArraySlice<UInt8>, at start: Int) -> UInt16? {
        guard start + 4 <= raw.endIndex else { return nil }
        var value: UInt16 = 0
        for byte in raw[start..<start + 4] {
            guard let digit = InputHygiene.hexValue(byte) else { return nil }
            value = value << 4 | UInt16(digit)
        }
        return value
    }

    /// A key as it appears in a field path: the usual escapes undone; `*` for a key too long or
    /// too strange to echo.
    private static func keyText(_ raw: ArraySlice<UInt8>) -> String {
        var out: [UInt8] = []
        var position = raw.startIndex
        while position < raw.endIndex {
            if raw[position] == UInt8(ascii: "\\"), position + 1 < raw.endIndex, raw[position + 1] != UInt8(ascii: "u") {
                out.append(raw[position + 1])
                position += 2
            } else {
                out.append(raw[position])
                position += 1
            }
        }
        return InputHygiene.printableName(out) ?? "*"
    }

    /// `metadata.tags[2]`; `body` at the root.
    private func path() -> String {
        var text = ""
        for frame in stack {
            switch frame {
            case .object(let key?, false):
                text += text.isEmpty ? key : ".\(key)"
            case .array(let position):
                text += "[\(position)]"
            case .object:
                break
            }
        }
        return text.isEmpty ? "body" : text
    }
}
