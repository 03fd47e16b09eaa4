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

/// What the lines of an import are: App Store receipts, or StoreKit 2 transactions (a signed
/// transaction or a transaction id each), sent to their own batch endpoint.
public enum ImportKind: String, Sendable, CaseIterable {
    case receipts, transactions

    /// The batch endpoint's path.
    public var path: String { self == .receipts ? BulkEndpoint.receiptsPath : BulkEndpoint.transactionsPath }
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
    public let kind: ImportKind
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var position = 0
    private var finished = false
    /// The number of the last line read.
    public private(set) var lineNumber = 0
    /// CSV: the columns of the header line.
    private var columns: [String]?

    /// Reads `handle` as `format`, each line a `kind` item.
    public init(handle: FileHandle, format: ImportFormat, kind: ImportKind = .receipts) {
        self.handle = handle
        self.format = format
        self.kind = kind
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
                return ImportLine(number: lineNumber, item: Self.ndjsonItem(trimmed, kind: kind))
            case .lines:
                return ImportLine(number: lineNumber, item: .success(Self.lineItem(trimmed, kind: kind)))
            case .csv:
                guard let columns else {
                    columns = try Self.header(trimmed, kind: kind)
                    continue
                }
                return ImportLine(number: lineNumber, item: Self.csvItem(trimmed, columns: columns, kind: kind))
            }
        }
        return nil
    }

    /// Skips lines up to and including `number` (a resumed import), without parsing them.
    public func skip(through number: Int) throws {
        while lineNumber < number, let line = readLine() {
            lineNumber += 1
            if format == .csv, columns == nil, !Self.trimmed(line).isEmpty { columns = try Self.header(Self.trimmed(line), kind: kind) }
        }
    }

    // MARK: - Items

    /// The columns a CSV header may name, per kind (the single endpoint's fields).
    static func csvColumns(_ kind: ImportKind) -> Set<String> {
        let submission: Set<String> = ["user_identifier", "country_code", "identifier_for_vendor", "ip_address"]
        return submission.union(kind == .receipts ? ["receipt"] : ["signed_transaction", "transaction_id", "environment"])
    }

    /// The fields of which one names the item (`receipt`, or a transaction's proof).
    static func proofFields(_ kind: ImportKind) -> [String] { kind == .receipts ? ["receipt"] : ["signed_transaction", "transaction_id"] }

    /// A line that names no receipt (or no transaction).
    static func missingProof(_ kind: ImportKind) -> ImportRejection {
        kind == .receipts
            ? ImportRejection(field: "receipt", reason: "is required")
            : ImportRejection(field: "signed_transaction", reason: "or transaction_id is required")
    }

    static func ndjsonItem(_ line: ArraySlice<UInt8>, kind: ImportKind = .receipts) -> Result<[UInt8], ImportRejection> {
        let bytes = Array(line)
        guard let value = JSONValue.parseLeniently(bytes) else {
            return .failure(ImportRejection(field: "line", reason: "is not JSON"))
        }
        guard let object = value.objectValue else { return .failure(ImportRejection(field: "line", reason: "is not a JSON object")) }
        let proofs = proofFields(kind)
        guard proofs.contains(where: { if case .string(let text)? = object[$0] { !text.isEmpty } else { false } }) else {
            return .failure(missingProof(kind))
        }
        return .success(bytes)
    }

    /// A bare line: a base64 receipt, or a transaction id (digits) or signed transaction (JWS).
    static func lineItem(_ line: ArraySlice<UInt8>, kind: ImportKind) -> [UInt8] {
        let text = String(decoding: line, as: UTF8.self)
        guard kind == .transactions else { return object(["receipt": text]) }
        return object([line.allSatisfy { (48...57).contains($0) } ? "transaction_id" : "signed_transaction": text])
    }

    static func header(_ line: ArraySlice<UInt8>, kind: ImportKind = .receipts) throws -> [String] {
        let names = try fields(line).map { $0.lowercased() }
        let proofs = proofFields(kind)
        guard names.contains(where: proofs.contains) else {
            throw ImportRejection(field: "header", reason: "has no \(proofs.joined(separator: " or ")) column")
        }
        let known = csvColumns(kind)
        if let unknown = names.first(where: { !known.contains($0) }) {
            throw ImportRejection(field: "header", reason: "has an unknown column \(unknown.prefix(40))")
        }
        return names
    }

    static func csvItem(_ line: ArraySlice<UInt8>, columns: [String], kind: ImportKind = .receipts) -> Result<[UInt8], ImportRejection> {
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
        let proofs = proofFields(kind)
        guard proofs.contains(where: { object[$0] != nil }) else {
            return .failure(missingProof(kind))
        }
        return .success(Self.object(object))
    }

    /// RFC 4180 fields of one line (``BulkItems/csvFields(_:)``).
    static func fields(_ line: ArraySlice<UInt8>) throws -> [String] {
        guard let fields = BulkItems.csvFields(line) else { throw ImportRejection(field: "line", reason: "has an unclosed quote") }
        return fields
    }

    static func object(_ fields: [String: String]) -> [UInt8] {
        var writer = JSONWriter()
        writer.openObject()
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) { writer.member(name, value) }
        writer.closeObject()
        return writer.bytes
    }

    static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> { BulkItems.trimmedBlanks(bytes) }

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
