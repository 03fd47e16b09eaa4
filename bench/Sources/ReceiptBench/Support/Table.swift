import Foundation

/// A fixed-width text table: the first column left-aligned, the others right-aligned.
struct TextTable {
    var title: String
    var headers: [String]
    var rows: [[String]] = []
    var notes: [String] = []

    init(title: String, headers: [String]) {
        self.title = title
        self.headers = headers
    }

    mutating func add(_ row: [String]) { rows.append(row) }

    func render() -> String {
        let all = [headers] + rows
        let widths = headers.indices.map { column in all.map { $0.indices.contains(column) ? $0[column].count : 0 }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            headers.indices.map { column in
                let cell = cells.indices.contains(column) ? cells[column] : ""
                let pad = String(repeating: " ", count: widths[column] - cell.count)
                return column == 0 ? cell + pad : pad + cell
            }
            .joined(separator: "  ")
        }
        let rule = String(repeating: "-", count: widths.reduce(0, +) + 2 * (widths.count - 1))
        var out = [title, line(headers), rule]
        out += rows.map(line)
        out += notes.map { "  " + $0 }
        return out.joined(separator: "\n")
    }
}

/// Number formatting shared by the rows: µs with one decimal below 1000, none above.
enum Format {
    static func micros(_ value: Double) -> String {
        guard value.isFinite else { return "-" }
        return value < 1_000 ? String(format: "%.1f", value) : String(format: "%.0f", value)
    }

    static func rate(_ value: Double) -> String {
        guard value.isFinite else { return "-" }
        return String(format: "%.0f", value)
    }

    /// Rounded for JSON, so results.json diffs stay readable.
    static func json(_ value: Double, places: Double = 10) -> Double {
        value.isFinite ? (value * places).rounded() / places : -1
    }
}
