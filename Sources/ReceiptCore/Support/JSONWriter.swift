import Foundation

/// Writes JSON bytes directly, for the documents written on every request (the receipt resource,
/// the job envelope): Foundation's `JSONEncoder` builds a tree of boxed values first and cost the
/// ingestion API a third of its CPU. Output is plain JSON that `JSONDecoder` reads back.
public struct JSONWriter {
    /// The document so far.
    public private(set) var bytes: [UInt8]
    private var needsComma: [Bool] = [false]
    private var afterKey = false

    /// Creates an empty writer.
    public init(capacity: Int = 1024) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// `{`; pair with ``closeObject()``.
    public mutating func openObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma.append(false)
    }

    /// `}`.
    public mutating func closeObject() {
        needsComma.removeLast()
        bytes.append(UInt8(ascii: "}"))
    }

    /// `[`; pair with ``closeArray()``.
    public mutating func openArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma.append(false)
    }

    /// `]`.
    public mutating func closeArray() {
        needsComma.removeLast()
        bytes.append(UInt8(ascii: "]"))
    }

    /// An object key; the next value written is its value.
    public mutating func key(_ name: String) {
        separate()
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
        afterKey = true
    }

    /// A value that is already JSON (a `jsonb` column as Postgres prints it): appended as is, so
    /// the caller vouches that `json` is one well-formed JSON value.
    public mutating func raw(_ json: some Collection<UInt8>) {
        separate()
        bytes.append(contentsOf: json)
    }

    /// A string value.
    public mutating func string(_ value: String) {
        separate()
        appendQuoted(value)
    }

    /// A date as milliseconds since 1970 (`JSONEncoder`'s `.millisecondsSince1970`).
    public mutating func milliseconds(_ date: Date) {
        number(date.timeIntervalSince1970 * 1000)
    }

    /// An integer value.
    public mutating func int(_ value: Int64) {
        separate()
        bytes.append(contentsOf: String(value).utf8)
    }

    /// A number: integral values without a fraction, others in Swift's shortest round-trip form.
    public mutating func number(_ value: Double) {
        separate()
        if value.isFinite, value == value.rounded(), abs(value) < 1e15 {
            bytes.append(contentsOf: String(Int64(value)).utf8)
        } else if value.isFinite {
            bytes.append(contentsOf: value.description.utf8)
        } else {
            bytes.append(contentsOf: "null".utf8)  // JSON has no NaN or infinity
        }
    }

    /// `true` or `false`.
    public mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// `null`.
    public mutating func null() {
        separate()
        bytes.append(contentsOf: "null".utf8)
    }

    /// `"name": value`, or nothing when `value` is nil (as `JSONEncoder` omits absent optionals).
    public mutating func member(_ name: String, _ value: String?) {
        guard let value else { return }
        key(name)
        string(value)
    }

    /// `"name": value`, or nothing when `value` is nil.
    public mutating func member(_ name: String, _ value: Int?) {
        guard let value else { return }
        key(name)
        int(Int64(value))
    }

    /// `"name": value`, or nothing when `value` is nil: an integer (amounts in milli-units).
    public mutating func member(_ name: String, _ value: Int64?) {
        guard let value else { return }
        key(name)
        int(value)
    }

    /// `"name": value`, or nothing when `value` is nil.
    public mutating func member(_ name: String, _ value: Bool?) {
        guard let value else { return }
        key(name)
        bool(value)
    }

    /// `"name": value` as milliseconds since 1970, or nothing when `value` is nil.
    public mutating func member(_ name: String, milliseconds value: Date?) {
        guard let value else { return }
        key(name)
        milliseconds(value)
    }

    /// `"name": value`, or nothing when `value` is nil.
    public mutating func member(_ name: String, _ value: JSONValue?) {
        guard let value else { return }
        key(name)
        self.value(value)
    }

    /// Any JSON value; object keys sorted, so equal values give equal bytes.
    public mutating func value(_ value: JSONValue) {
        switch value {
        case .null: null()
        case .bool(let flag): bool(flag)
        case .number(let amount): number(amount)
        case .string(let text): string(text)
        case .array(let items):
            openArray()
            for item in items { self.value(item) }
            closeArray()
        case .object(let members):
            openObject()
            for name in members.keys.sorted() {
                key(name)
                self.value(members[name]!)
            }
            closeObject()
        }
    }

    private mutating func separate() {
        if afterKey {
            afterKey = false
            return
        }
        if needsComma[needsComma.count - 1] { bytes.append(UInt8(ascii: ",")) }
        needsComma[needsComma.count - 1] = true
    }

    private mutating func appendQuoted(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        // Most strings (base64 receipts, ids, product codes) need no escaping: one scan, one copy.
        var text = text
        let clean = text.withUTF8 { utf8 -> Bool in
            guard !Self.needsEscaping(utf8) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if clean {
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0x0F)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Whether `utf8` holds a quote, a backslash or a control character.
    static func needsEscaping(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        JSONPlainRun.end(of: utf8, from: 0) < utf8.count
    }
}

extension JSONValue {
    /// The size of this value as JSON (what a size cap on client metadata measures).
    public var encodedSize: Int {
        var writer = JSONWriter()
        writer.value(self)
        return writer.bytes.count
    }
}

extension JSONValue {
    /// This value as JSON text (what a `jsonb` column is sent).
    public var encodedText: String {
        var writer = JSONWriter()
        writer.value(self)
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}
