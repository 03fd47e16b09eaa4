import Foundation
import ReceiptCore

// How the pages show envelopes, ids and times.
extension AdminPages {
    /// The envelope as indented JSON, with the receipt truncated (``JobSetEntry/envelopeForDisplay``).
    static func prettyEnvelope(_ entry: JobSetEntry) -> String {
        guard let display = entry.envelopeForDisplay,
            let value = try? JSONDecoder().decode(JSONValue.self, from: Data(display.encoded()))
        else { return "(not a job envelope: \(entry.raw.count) bytes that could not be read)" }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// A job id short enough for a list column: the random tail, since a UUIDv7 starts with its
    /// timestamp and jobs queued together share their first characters.
    static func shortID(_ id: JobSetEntry.ID) -> String { "…" + id.rawValue.suffix(12) }

    static func utc(_ date: Date?) -> String {
        guard let date else { return "—" }
        // "2018-02-26 10:35:47 UTC" without the zone: the pages say UTC once, in the headings.
        let text = APITimestamp(date).utc
        return text.hasSuffix(" UTC") ? String(text.dropLast(4)) : text
    }

    /// "3 min ago", "in 2 h": coarse, for scanning a list.
    static func relative(_ date: Date?, now: Date) -> String {
        guard let date else { return "—" }
        let seconds = Int(now.timeIntervalSince(date).rounded())
        let magnitude = abs(seconds)
        let text =
            switch magnitude {
            case ..<60: "\(magnitude) s"
            case ..<3600: "\(magnitude / 60) min"
            case ..<172_800: "\(magnitude / 3600) h"
            default: "\(magnitude / 86_400) d"
            }
        return seconds >= 0 ? "\(text) ago" : "in \(text)"
    }
}
