import Foundation

extension String {
    /// The bytes as a String if they are well-formed UTF-8, else nil: what
    /// `String(validating:as:)` answers, faster.
    ///
    /// That initializer runs unspecialized here, and looking up its generic metadata for every
    /// string of every Apple answer was 2.5 % of a worker's CPU. `String(decoding:as:)` is fast
    /// but repairs ill-formed input with U+FFFD, so the text is compared with the input: equal
    /// means nothing was repaired, so the input was well-formed.
    init?(wellFormedUTF8 raw: UnsafeBufferPointer<UInt8>) {
        var text = String(decoding: raw, as: UTF8.self)
        let unchanged = text.withUTF8 { utf8 in
            utf8.count == raw.count && (raw.isEmpty || memcmp(utf8.baseAddress!, raw.baseAddress!, raw.count) == 0)
        }
        guard unchanged else { return nil }
        self = text
    }

    /// ``init(wellFormedUTF8:)`` for bytes in an array or a slice of one.
    init?(wellFormedUTF8 bytes: ArraySlice<UInt8>) {
        guard let text = bytes.withUnsafeBufferPointer({ String(wellFormedUTF8: $0) }) else { return nil }
        self = text
    }
}
