import Foundation
import ReceiptCore

/// The overview's chart, drawn on the server as inline SVG: one stacked bar per minute of the last
/// hour, Apple's verdicts at the bottom and the failures above them, coloured by class. No script,
/// no inline style (the CSP forbids both): colours come from classes in the stylesheet.
enum ActivityChart {
    /// One stacked series: its CSS class, its legend label, and its count in a minute.
    struct Series: Sendable {
        var name: String
        var label: String
        var count: @Sendable (ActivityTally) -> Int
    }

    static let series: [Series] =
        [
            Series(name: "validated", label: "valid", count: { $0.outcomes[.validated, default: 0] }),
            Series(name: "invalid", label: "invalid", count: { $0.outcomes[.invalid, default: 0] }),
        ]
        + FailureClass.allCases.map { failure in
            Series(
                name: failure.rawValue, label: failure.rawValue.replacingOccurrences(of: "_", with: " "), count: { $0.failures[failure, default: 0] })
        }

    static let width = 720
    static let height = 180
    static let left = 44
    static let bottom = 22
    static let top = 8

    /// The SVG element for `minutes` (oldest first). Every text in it is escaped.
    static func svg(_ minutes: [ActivityMinute]) -> String {
        let plotWidth = Double(width - left - 8)
        let plotHeight = Double(height - bottom - top)
        let totals = minutes.map { minute in series.reduce(0) { $0 + $1.count(minute.tally) } }
        let peak = niceCeiling(totals.max() ?? 0)
        let slot = plotWidth / Double(max(minutes.count, 1))
        let barWidth = max(1, slot - 2)
        var out = ""
        out += #"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 \#(width) \#(height)" role="img" "#
        out += #"aria-label="Jobs per minute over the last hour, by outcome and failure class">"#
        // Grid and axis labels: 0, half, peak.
        for fraction in [0.0, 0.5, 1.0] {
            let y = Double(top) + plotHeight * (1 - fraction)
            out += #"<line class="grid" x1="\#(left)" x2="\#(width - 8)" y1="\#(format(y))" y2="\#(format(y))"/>"#
            let value = Int((Double(peak) * fraction).rounded())
            out += #"<text class="axis" x="\#(left - 6)" y="\#(format(y + 4))" text-anchor="end">\#(value)</text>"#
        }
        for (index, minute) in minutes.enumerated() {
            let x = Double(left) + Double(index) * slot + 1
            var y = Double(top) + plotHeight
            var parts: [String] = []
            for item in series {
                let count = item.count(minute.tally)
                guard count > 0 else { continue }
                parts.append("\(count) \(item.label)")
                let barHeight = plotHeight * Double(count) / Double(peak)
                y -= barHeight
                out += #"<rect class="s-\#(item.name)" x="\#(format(x))" y="\#(format(y))" width="\#(format(barWidth))" "#
                out += #"height="\#(format(max(barHeight, 0.5)))"><title>\#(escape("\(clock(minute.minute)) UTC: \(parts.last!)"))</title></rect>"#
            }
        }
        // Time labels every 15 minutes, from the newest minute back.
        if let last = minutes.indices.last {
            for back in stride(from: 0, through: last, by: 15) {
                let index = last - back
                let x = Double(left) + (Double(index) + 0.5) * slot
                let label = back == 0 ? "now" : "-\(back)m"
                out += #"<text class="axis" x="\#(format(x))" y="\#(height - 6)" text-anchor="middle">\#(label)</text>"#
            }
        }
        out += "</svg>"
        return out
    }

    /// The legend's rows: each series with its total over the hour.
    static func legend(_ minutes: [ActivityMinute]) -> [[String: Any]] {
        series.map { item in
            ["name": item.name, "label": item.label, "total": minutes.reduce(0) { $0 + item.count($1.tally) }]
        }
    }

    /// A round number at or above `value` (at least 4), so the axis reads 0 / 50 / 100, not 0 / 43.5 / 87.
    static func niceCeiling(_ value: Int) -> Int {
        guard value > 4 else { return 4 }
        var step = 1
        while step * 10 < value { step *= 10 }
        for multiple in [1, 2, 5, 10] where step * multiple >= value { return step * multiple }
        return step * 10
    }

    private static func format(_ value: Double) -> String { String(format: "%.1f", value) }

    private static func clock(_ date: Date) -> String {
        let seconds = Int(date.timeIntervalSince1970)
        let minutes = (seconds / 60) % 60
        let hours = (seconds / 3600) % 24
        return String(format: "%02d:%02d", hours, minutes)
    }

    /// Escapes text for HTML and SVG content and attribute values.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "&": out += "&amp;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }
}
