import Foundation
import ReceiptCore

/// The revenue page's charts, drawn on the server as inline SVG like the overview's: one bar per
/// day of one series (negative values below the zero line), no script and no inline style.
enum RevenueChart {
    static let width = 720
    static let height = 160
    static let left = 64
    static let bottom = 22
    static let top = 8

    /// The SVG element for `values` (one per day, oldest first), drawn in CSS class `s-<name>`;
    /// `unit` turns a value into its label (money in milli-units shows as units). Every text is escaped.
    static func svg(name: String, label: String, days: [String], values: [Int64], unit: (Int64) -> String) -> String {
        let plotWidth = Double(width - left - 8)
        let plotHeight = Double(height - bottom - top)
        let high = max(values.max() ?? 0, 0)
        let low = min(values.min() ?? 0, 0)
        let span = Double(max(high - low, 1))
        let zero = Double(top) + plotHeight * Double(high) / span
        let slot = plotWidth / Double(max(values.count, 1))
        let barWidth = max(1, slot - 2)
        var out = #"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 \#(width) \#(height)" role="img" "#
        out += #"aria-label="\#(ActivityChart.escape(label)) per day">"#
        for (value, y) in [(high, Double(top)), (0, zero), (low, Double(top) + plotHeight)] where value != 0 || y == zero {
            out += #"<line class="grid" x1="\#(left)" x2="\#(width - 8)" y1="\#(format(y))" y2="\#(format(y))"/>"#
            out += #"<text class="axis" x="\#(left - 6)" y="\#(format(y + 4))" text-anchor="end">\#(ActivityChart.escape(unit(value)))</text>"#
        }
        for (index, value) in values.enumerated() where value != 0 {
            let x = Double(left) + Double(index) * slot + 1
            let barHeight = max(plotHeight * Double(abs(value)) / span, 0.5)
            let y = value > 0 ? zero - barHeight : zero
            let day = index < days.count ? days[index] : ""
            out += #"<rect class="s-\#(name)" x="\#(format(x))" y="\#(format(y))" width="\#(format(barWidth))" height="\#(format(barHeight))">"#
            out += #"<title>\#(ActivityChart.escape("\(day): \(unit(value)) \(label)"))</title></rect>"#
        }
        if let first = days.first, let last = days.last {
            out += #"<text class="axis" x="\#(left)" y="\#(height - 6)">\#(ActivityChart.escape(first))</text>"#
            out += #"<text class="axis" x="\#(width - 8)" y="\#(height - 6)" text-anchor="end">\#(ActivityChart.escape(last))</text>"#
        }
        return out + "</svg>"
    }

    private static func format(_ value: Double) -> String { String(format: "%.1f", value) }
}
