import Foundation

/// A body format the softphone reads (the `Content-Type` of the answer tells it which).
public enum SoftphoneFormat: Sendable, Equatable, CaseIterable {
    /// `<root><final>1</final>…</root>`: the softphone's default.
    case xml
    /// `{"final":"1",…}`.
    case json
    /// `final=1&…`.
    case form

    /// The `Content-Type` of an answer in this format, exactly as the softphone's documentation
    /// spells it: no `charset` parameter, which a client comparing the whole header would trip on
    /// (and which none of the three needs: JSON and XML without a declaration are UTF-8, form text
    /// is ASCII).
    public var contentType: String {
        switch self {
        case .xml: "application/xml"
        case .json: "application/json"
        case .form: "application/x-www-form-urlencoded"
        }
    }

    /// The media types that select this format in `Accept`.
    var mediaTypes: [String] {
        switch self {
        case .xml: ["application/xml", "text/xml"]
        case .json: ["application/json", "text/json"]
        case .form: ["application/x-www-form-urlencoded"]
        }
    }

    /// The format to answer in: the one `Accept` ranks highest (RFC 9110 §12.5.1: the most specific
    /// matching range gives a type its weight); ties, no `Accept`, or nothing acceptable fall back to
    /// JSON for a JSON request and to XML otherwise. Never 406: the softphone must always get
    /// `final=1` in something it can read.
    public static func negotiate(accept: String?, requestWasJSON: Bool) -> SoftphoneFormat {
        let fallback: SoftphoneFormat = requestWasJSON ? .json : .xml
        guard let accept, !accept.isEmpty else { return fallback }
        var ranges: [(type: String, q: Double)] = []
        for item in accept.split(separator: ",").prefix(32) {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let type = parts.first, !type.isEmpty else { continue }
            var q = 1.0
            for parameter in parts.dropFirst() where parameter.hasPrefix("q=") {
                q = Double(parameter.dropFirst(2)).map { min(1, max(0, $0)) } ?? 0
            }
            ranges.append((type, q))
        }
        func weight(_ format: SoftphoneFormat) -> Double {
            var best: (specificity: Int, q: Double) = (0, 0)
            for range in ranges {
                let specificity: Int
                if format.mediaTypes.contains(range.type) {
                    specificity = 3
                } else if range.type.hasSuffix("/*"), format.mediaTypes.contains(where: { $0.hasPrefix(range.type.dropLast()) }) {
                    specificity = 2
                } else if range.type == "*/*" {
                    specificity = 1
                } else {
                    continue
                }
                if specificity > best.specificity || (specificity == best.specificity && range.q > best.q) {
                    best = (specificity, range.q)
                }
            }
            return best.q
        }
        // The fallback first, so it wins ties.
        let candidates = [fallback] + allCases.filter { $0 != fallback }
        let chosen = candidates.max { weight($0) < weight($1) } ?? fallback
        return weight(chosen) > 0 ? chosen : fallback
    }
}

/// One answer of the web service: `final=1` always, a `message` for the user, and on success a few
/// facts the provider's own systems can use (receipt id, product, transaction id).
public struct SoftphoneReply: Sendable, Equatable {
    /// The HTTP status code.
    public var status: Int
    /// The sentence shown to the user.
    public var message: String
    /// Further fields, in order; names are plain identifiers (safe as XML element names).
    public var fields: [Field]

    /// One extra field of the answer.
    public struct Field: Sendable, Equatable {
        /// The field's name: an XML element name, a JSON key, a form name.
        public var name: String
        /// The field's text.
        public var value: String

        /// Creates a field.
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// Creates an answer.
    public init(status: Int, message: String, fields: [Field] = []) {
        self.status = status
        self.message = message
        self.fields = fields
    }

    /// Every field of the body, in order: `final`, `message`, then ``fields``.
    public var pairs: [(String, String)] {
        [("final", "1"), ("message", message)] + fields.map { ($0.name, $0.value) }
    }

    /// The body in `format`.
    public func body(_ format: SoftphoneFormat) -> [UInt8] {
        switch format {
        case .xml:
            let elements = pairs.map { "<\($0.0)>\(Self.xmlEscaped($0.1))</\($0.0)>" }.joined()
            return Array("<root>\(elements)</root>".utf8)
        case .json:
            // Strings only, as in the seed's examples (`"final" : "1"`); a dictionary loses the
            // order, which JSON readers ignore anyway.
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let object = Dictionary(pairs, uniquingKeysWith: { first, _ in first })
            return (try? encoder.encode(object)).map { Array($0) } ?? Array(#"{"final":"1"}"#.utf8)
        case .form:
            return Array(SoftphoneForm.encode(pairs).utf8)
        }
    }

    /// Text escaped for XML character data; characters XML 1.0 cannot carry at all (most control
    /// characters, lone surrogates cannot occur in a Swift string) become U+FFFD.
    static func xmlEscaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
            case _ where scalar.value < 0x20 || scalar.value == 0xFFFE || scalar.value == 0xFFFF:
                out += "\u{FFFD}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
