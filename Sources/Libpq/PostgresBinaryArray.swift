#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A one-dimensional array parameter in Postgres's binary format (what `array_send` writes).
///
/// The worker writes a batch of rows as one array per column (`unnest($1::uuid[], …)`). As text,
/// every element is quoted by the client and scanned, unescaped and parsed back by the server's
/// `array_in`: 15 % of Postgres's CPU per validation, most of it the receipts' kilobytes of base64
/// and the dates (bench/README "Binary arrays"). In binary an element is its length and its bytes:
/// text as is, a `uuid` its 16 bytes, a `timestamptz` one integer.
///
/// The element type must be the one the statement's cast names (`$1::uuid[]` takes ``Element/uuid``):
/// Postgres refuses an array of another element type ("wrong element type").
///
/// ```swift
/// var ids = PostgresBinaryArray(.uuid)
/// for id in batch { ids.append(id) }
/// let query: PostgresQuery = "SELECT * FROM receipts WHERE id = ANY(\(ids)::uuid[])"
/// ```
public struct PostgresBinaryArray: Sendable, Equatable {
    /// The element types the façade encodes, each with its type OID.
    public enum Element: Int32, Sendable {
        case bool = 16
        case int8 = 20
        case int4 = 23
        case text = 25
        case timestamptz = 1184
        case uuid = 2950
    }

    /// The array's element type.
    public let element: Element
    /// Elements appended so far, `NULL`s included.
    public private(set) var count = 0
    private var hasNull = false
    /// A text element held a NUL byte, which Postgres's text types cannot store.
    private(set) var containsNUL = false
    /// A number did not fit `int4`: the statement fails as Postgres would fail it, not the process.
    private(set) var containsOutOfRange = false
    /// The header's 20 bytes (patched by ``writeEncoded(to:)``), then each element's length and bytes.
    private var buffer: [UInt8]

    /// An empty array of `element`s.
    ///
    /// - Parameters:
    ///   - element: The element type; it must match the statement's cast.
    ///   - capacity: Bytes to reserve for the elements.
    public init(_ element: Element, capacity: Int = 0) {
        self.element = element
        buffer = [UInt8](repeating: 0, count: 20)
        buffer.reserveCapacity(20 + capacity)
    }

    /// A `text[]` of these strings.
    ///
    /// - Parameter texts: The elements, in order.
    public init(texts: some Sequence<String>) {
        self.init(.text)
        for text in texts { append(text) }
    }

    /// A `uuid[]` of these ids.
    ///
    /// - Parameter uuids: The elements, in order.
    public init(uuids: some Sequence<UUID>) {
        self.init(.uuid)
        for id in uuids { append(id) }
    }

    /// Whether no element was appended.
    public var isEmpty: Bool { count == 0 }

    /// Appends SQL `NULL`.
    public mutating func appendNull() {
        count += 1
        hasNull = true
        put(Int32(-1))
    }

    /// Appends a `text` element; `nil` is `NULL`.
    ///
    /// - Parameter value: The string, sent as its UTF-8 bytes.
    public mutating func append(_ value: String?) {
        precondition(element == .text, "a String goes into a text[] array")
        guard var value else { return appendNull() }
        count += 1
        value.withUTF8 { utf8 in
            put(Int32(utf8.count))
            if !containsNUL, let base = utf8.baseAddress, memchr(base, 0, utf8.count) != nil { containsNUL = true }
            buffer.append(contentsOf: utf8)
        }
    }

    /// Appends a `uuid` element; `nil` is `NULL`.
    ///
    /// - Parameter value: The id, sent as its 16 bytes.
    public mutating func append(_ value: UUID?) {
        precondition(element == .uuid, "a UUID goes into a uuid[] array")
        guard let value else { return appendNull() }
        count += 1
        put(Int32(16))
        withUnsafeBytes(of: value.uuid) { buffer.append(contentsOf: $0) }
    }

    /// Appends an `int4` or `int8` element, per the array's element type; `nil` is `NULL`.
    ///
    /// - Parameter value: The number. One beyond `int4`'s 32 bits (an answer's field can hold any
    ///   number) makes the statement fail with SQLSTATE 22003, as the text form did.
    public mutating func append(_ value: Int?) {
        guard let value else { return appendNull() }
        count += 1
        switch element {
        case .int4:
            put(Int32(4))
            if Int32(exactly: value) == nil { containsOutOfRange = true }
            put(Int32(truncatingIfNeeded: value))
        case .int8:
            put(Int32(8))
            put(Int64(value))
        default: preconditionFailure("an Int goes into an int[] or bigint[] array")
        }
    }

    /// Appends a `boolean` element; `nil` is `NULL`.
    ///
    /// - Parameter value: The flag.
    public mutating func append(_ value: Bool?) {
        precondition(element == .bool, "a Bool goes into a boolean[] array")
        guard let value else { return appendNull() }
        count += 1
        put(Int32(1))
        buffer.append(value ? 1 : 0)
    }

    /// Appends a `timestamptz` element; `nil` is `NULL`.
    ///
    /// - Parameter value: The instant, rounded to the millisecond as text binds are; beyond the
    ///   years 1–9999 or not a number it is `±infinity`.
    public mutating func append(_ value: Date?) {
        precondition(element == .timestamptz, "a Date goes into a timestamptz[] array")
        guard let value else { return appendNull() }
        count += 1
        put(Int32(8))
        put(PostgresTimestamp.binary(value))
    }

    /// The length of the array as ``writeEncoded(to:)`` writes it.
    var encodedCount: Int { count == 0 ? 12 : buffer.count }

    /// Writes the array as `array_recv` reads it (dimensions, `NULL` flag and element type, then the
    /// elements; an empty array has no dimension), ``encodedCount`` bytes, to `destination`: the
    /// connection copies a batch's column once, straight into the memory libpq sends from.
    func writeEncoded(to destination: UnsafeMutableRawPointer) {
        buffer.withUnsafeBytes { destination.copyMemory(from: $0.baseAddress!, byteCount: encodedCount) }
        func patch(_ value: Int32, at offset: Int) {
            destination.storeBytes(of: value.bigEndian, toByteOffset: offset, as: Int32.self)
        }
        patch(count == 0 ? 0 : 1, at: 0)
        patch(hasNull ? 1 : 0, at: 4)
        patch(element.rawValue, at: 8)
        guard count > 0 else { return }
        patch(Int32(count), at: 12)
        patch(1, at: 16)  // the lower bound: Postgres arrays count from 1
    }

    private mutating func put(_ value: Int32) {
        withUnsafeBytes(of: value.bigEndian) { buffer.append(contentsOf: $0) }
    }

    private mutating func put(_ value: Int64) {
        withUnsafeBytes(of: value.bigEndian) { buffer.append(contentsOf: $0) }
    }
}
