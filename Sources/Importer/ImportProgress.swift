import Foundation

/// What `receiptq import` shows while it runs: on a terminal, one bar redrawn in place (lines
/// done of the total, rate, ETA, refused lines); otherwise a plain line every few seconds, which a
/// log collector keeps readable.
final class ImportProgress: @unchecked Sendable {
    private let output: FileHandle
    private let terminal: Bool
    private let plainInterval: Double
    private var total: Int?
    private var startedAt = Date()
    private var startLines = 0
    private var lastDrawn = Date.distantPast
    private var done = 0
    private var counts = BulkImporter.Counts()

    init(output: FileHandle, plainInterval: Double) {
        self.output = output
        self.terminal = isatty(output.fileDescriptor) == 1
        self.plainInterval = plainInterval
    }

    func start(total: Int?, done: Int, counts: BulkImporter.Counts) {
        self.total = total
        self.done = done
        self.counts = counts
        startLines = done
        startedAt = Date()
        if done > 0 { write("resuming after line \(done)\n") }
        draw(force: true)
    }

    func update(done: Int, counts: BulkImporter.Counts) {
        self.done = done
        self.counts = counts
        draw(force: false)
    }

    /// A message above the bar.
    func note(_ message: String) {
        if terminal { write("\r\u{1B}[K") }
        write("import: \(message)\n")
        draw(force: true)
    }

    func finish() {
        draw(force: true)
        if terminal { write("\n") }
    }

    /// The line without the bar: lines done (of total), rate over this run, ETA, refusals.
    var status: String {
        let elapsed = max(Date().timeIntervalSince(startedAt), 0.001)
        let rate = Double(done - startLines) / elapsed
        var text = total.map { "\(Self.grouped(done))/\(Self.grouped($0)) lines" } ?? "\(Self.grouped(done)) lines"
        text += String(format: ", %.0f/s", rate)
        if let total, rate > 0, done < total { text += ", ETA \(Self.duration(Double(total - done) / rate))" }
        text += ", accepted \(Self.grouped(counts.accepted)), duplicates \(Self.grouped(counts.duplicates))"
        text += ", fraud \(Self.grouped(counts.fraud)), invalid \(Self.grouped(counts.invalid))"
        return text
    }

    private func draw(force: Bool) {
        let now = Date()
        if terminal {
            guard force || now.timeIntervalSince(lastDrawn) >= 0.1 else { return }
            let width = 28
            let share = total.map { $0 > 0 ? min(1, Double(done) / Double($0)) : 1 } ?? 0
            let filled = Int(share * Double(width))
            let bar = total == nil ? "" : "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "] "
            let percent = total == nil ? "" : String(format: "%3.0f%% ", share * 100)
            write("\r\u{1B}[K" + bar + percent + status)
        } else {
            guard force || now.timeIntervalSince(lastDrawn) >= plainInterval else { return }
            write("import: " + status + "\n")
        }
        lastDrawn = now
    }

    private func write(_ text: String) { try? output.write(contentsOf: Data(text.utf8)) }

    static func grouped(_ value: Int) -> String {
        let digits = String(value)
        var text = ""
        for (index, character) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { text += "," }
            text.append(character)
        }
        return text
    }

    static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded())
        if whole >= 3_600 { return "\(whole / 3_600)h\(String(format: "%02d", whole % 3_600 / 60))m" }
        if whole >= 60 { return "\(whole / 60)m\(String(format: "%02d", whole % 60))s" }
        return "\(whole)s"
    }
}
