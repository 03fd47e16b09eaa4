import Foundation
import SystemTesting
import Testing

/// Finds secrets and receipts in logs: each secret whole, each receipt whole or any 24 characters
/// of it past its first 16 (a PKCS#7 header that all receipts share), in the raw text, in the
/// decoded JSON strings (`\/` escapes undone) and in the percent-decoded text (a logged URL or form).
public struct LeakScanner {
    /// 24 bytes, as three words.
    struct Window: Hashable {
        var a: UInt64
        var b: UInt64
        var c: UInt64

        init(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
            a = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            b = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            c = bytes.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self)
        }
    }

    public static let windowSize = 24
    public static let skippedPrefix = 16

    public let needles: [(name: String, value: [UInt8])]
    private var windows: [Window: String] = [:]

    public init(secrets: [String: String], receipts: [String: String]) {
        var needles = secrets.map { ($0.key, Array($0.value.utf8)) }
        var windows: [Window: String] = [:]
        for (name, receipt) in receipts {
            needles.append(("receipt \(name)", Array(receipt.utf8)))
            let bytes = Array(receipt.utf8)
            guard bytes.count >= Self.skippedPrefix + Self.windowSize else { continue }
            bytes.withUnsafeBytes { raw in
                for offset in Self.skippedPrefix...(bytes.count - Self.windowSize) { windows[Window(raw, at: offset)] = name }
            }
        }
        self.needles = needles
        self.windows = windows
    }

    /// One line per leak found: which secret or receipt, in which file and rendering.
    public func scan(_ files: [(name: String, bytes: [UInt8], values: String)]) -> [String] {
        var leaks: [String] = []
        for file in files {
            let renderings = [
                ("raw", file.bytes), ("JSON-decoded", Array(file.values.utf8)), ("percent-decoded", Self.percentDecoded(file.bytes)),
            ]
            for (rendering, bytes) in renderings {
                for (name, needle) in needles where bytes.firstRange(of: needle) != nil {
                    leaks.append("\(file.name) (\(rendering)): \(name)")
                }
                guard bytes.count >= Self.windowSize else { continue }
                var found: Set<String> = []
                bytes.withUnsafeBytes { raw in
                    for offset in 0...(bytes.count - Self.windowSize) {
                        if let name = windows[Window(raw, at: offset)] { found.insert(name) }
                    }
                }
                for name in found.sorted() { leaks.append("\(file.name) (\(rendering)): 24 characters of receipt \(name)") }
            }
        }
        return leaks
    }

    /// `%XX` decoded wherever it is valid, everything else kept.
    public static func percentDecoded(_ bytes: [UInt8]) -> [UInt8] {
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count, let high = hex(bytes[index + 1]), let low = hex(bytes[index + 2]) {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return out
    }
}
