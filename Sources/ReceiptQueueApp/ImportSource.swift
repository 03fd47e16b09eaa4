import Foundation
import ReceiptCore

/// What `receiptq import` reads: one receipt per line of a file or of standard input, in one of
/// three shapes, turned into the single endpoint's JSON body (what the batch endpoint takes).
public enum ImportFormat: String, Sendable, CaseIterable {
    /// One JSON object per line, shaped like `POST /client/itunes_connect/receipts`'s body.
    case ndjson
    /// A header line naming the columns (`receipt` and any of `user_identifier`, `country_code`,
    /// `identifier_for_vendor`, `ip_address`), then one receipt per line; fields may be quoted.
    case csv
    /// One base64 receipt per line, nothing else.
    case lines
}

/// One line of the input: its number (1-based, as an editor shows it) and either the item to send
/// or why it cannot be sent.
public struct ImportLine: Sendable {
    public var number: Int
    public var item: Result<[UInt8], ImportRejection>
}

/// A line refused before anything was sent (or by the API), by its number: never its content,
/// which holds a customer's receipt.
public struct ImportRejection: Error, Sendable, Equatable {
    public var field: String
    public var reason: String
}

/// Reads lines from a file handle in chunks (a file of millions of receipts is never in memory)
/// and makes items of them.
public final class ImportSource {
    public let format: ImportFormat
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var position = 0
    private var finished = false
    /// The number of the last line read.
    public private(set) var lineNumber = 0
    /// CSV: the columns of the header line.
    private var columns: [String]?

    /// Reads `handle` as `format`.
    public init(handle: FileHandle, format: ImportFormat) {
        self.handle = handle
        self.format = format
    }

    /// The next line that holds something, or nil at the end. Blank lines are skipped (their
    /// numbers still count); a CSV header is read, not returned.
    /// - Throws: ``ImportRejection`` for a CSV header without a `receipt` column or with an
    ///   unknown one: nothing of such a file can be sent.
    public func next() throws -> ImportLine? {
        while let line = readLine() {
            lineNumber += 1
            let trimmed = Self.trimmed(line)
            guard !trimmed.isEmpty else { continue }
            switch format {
            case .ndjson:
                return ImportLine(number: lineNumber, item: Self.ndjsonItem(trimmed))
            case .lines:
                return ImportLine(number: lineNumber, item: .success(Self.object(["receipt": String(decoding: trimmed, as: UTF8.self)])))
            case .csv:
                guard let columns else {
                    columns = try Self.header(trimmed)
                    continue
                }
                return ImportLine(number: lineNumber, item: Self.csvItem(trimmed, columns: columns))
            }
        }
        return nil
    }

    /// Skips lines up to and including `number` (a resumed import), without parsing them.
    public func skip(through number: Int) throws {
        while lineNumber < number, let line = readLine() {
            lineNumber += 1
            if format == .csv, columns == nil, !Self.trimmed(line).isEmpty { columns = try Self.header(Self.trimmed(line)) }
        }
    }

    // MARK: - Items

    static let csvColumns: Set<String> = ["receipt", "user_identifier", "country_code", "identifier_for_vendor", "ip_address"]

    static func ndjsonItem(_ line: ArraySlice<UInt8>) -> Result<[UInt8], ImportRejection> {
        let bytes = Array(line)
        guard let value = JSONValue.parseLeniently(bytes) else {
            return .failure(ImportRejection(field: "line", reason: "is not JSON"))
        }
        guard let object = value.objectValue else { return .failure(ImportRejection(field: "line", reason: "is not a JSON object")) }
        guard case .string(let receipt)? = object["receipt"], !receipt.isEmpty else {
            return .failure(ImportRejection(field: "receipt", reason: "is required"))
        }
        return .success(bytes)
    }

    static func header(_ line: ArraySlice<UInt8>) throws -> [String] {
        let names = try fields(line).map { $0.lowercased() }
        guard names.contains("receipt") else { throw ImportRejection(field: "header", reason: "has no receipt column") }
        if let unknown = names.first(where: { !csvColumns.contains($0) }) {
            throw ImportRejection(field: "header", reason: "has an unknown column \(unknown.prefix(40))")
        }
        return names
    }

    static func csvItem(_ line: ArraySlice<UInt8>, columns: [String]) -> Result<[UInt8], ImportRejection> {
        let values: [String]
        do {
            values = try fields(line)
        } catch let rejection as ImportRejection {
            return .failure(rejection)
        } catch {
            return .failure(ImportRejection(field: "line", reason: "cannot be read"))
        }
        guard values.count == columns.count else {
            return .failure(ImportRejection(field: "line", reason: "has \(values.count) fields, the header \(columns.count)"))
        }
        var object: [String: String] = [:]
        for (name, value) in zip(columns, values) where !value.isEmpty { object[name] = value }
        guard object["receipt"] != nil else { return .failure(ImportRejection(field: "receipt", reason: "is required")) }
        return .success(Self.object(object))
    }

    /// RFC 4180 fields of one line: separated by commas, optionally quoted (`""` is a quote).
    static func fields(_ line: ArraySlice<UInt8>) throws -> [String] {
        var fields: [String] = []
        var field: [UInt8] = []
        var quoted = false
        var index = line.startIndex
        var atStart = true
        while index < line.endIndex {
            let byte = line[index]
            if quoted {
                if byte == UInt8(ascii: "\"") {
                    if index + 1 < line.endIndex, line[index + 1] == UInt8(ascii: "\"") {
                        field.append(byte)
                        index += 1
                    } else {
                        quoted = false
                    }
                } else {
                    field.append(byte)
                }
            } else if byte == UInt8(ascii: ",") {
                fields.append(String(decoding: trimmed(field[...]), as: UTF8.self))
                field = []
                atStart = true
                index += 1
                continue
            } else if byte == UInt8(ascii: "\""), atStart, trimmed(field[...]).isEmpty {
                quoted = true
                field = []
            } else {
                field.append(byte)
            }
            atStart = false
            index += 1
        }
        guard !quoted else { throw ImportRejection(field: "line", reason: "has an unclosed quote") }
        fields.append(String(decoding: trimmed(field[...]), as: UTF8.self))
        return fields
    }

    static func object(_ fields: [String: String]) -> [UInt8] {
        var writer = JSONWriter()
        writer.openObject()
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) { writer.member(name, value) }
        writer.closeObject()
        return writer.bytes
    }

    static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var low = bytes.startIndex
        var high = bytes.endIndex
        while low < high, bytes[low] == 0x20 || bytes[low] == 0x09 || bytes[low] == 0x0D { low += 1 }
        while high > low, bytes[high - 1] == 0x20 || bytes[high - 1] == 0x09 || bytes[high - 1] == 0x0D { high -= 1 }
        return bytes[low..<high]
    }

    // MARK: - Reading

    private func readLine() -> ArraySlice<UInt8>? {
        while true {
            if let newline = buffer[position...].firstIndex(of: 0x0A) {
                let line = buffer[position..<newline]
                position = newline + 1
                return line
            }
            if finished {
                guard position < buffer.count else { return nil }
                let line = buffer[position...]
                position = buffer.count
                return line
            }
            buffer.removeFirst(position)
            position = 0
            let chunk = handle.readData(ofLength: 1 << 20)
            if chunk.isEmpty { finished = true } else { buffer.append(contentsOf: chunk) }
        }
    }

    /// The lines of a file, counted in one pass (for the progress bar's total); nil for what
    /// cannot be read twice (standard input, a pipe).
    public static func countLines(path: String) -> Int? {
        guard path != "-", let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        var count = 0
        var last: UInt8 = 0x0A
        while true {
            let chunk = handle.readData(ofLength: 1 << 20)
            if chunk.isEmpty { break }
            chunk.withUnsafeBytes { bytes in
                for byte in bytes where byte == 0x0A { count += 1 }
                last = bytes.last ?? last
            }
        }
        return count + (last == 0x0A ? 0 : 1)
    }
}
