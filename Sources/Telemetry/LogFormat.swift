/// How log lines are written (`LOG_FORMAT`).
public enum LogFormat: String, Sendable, CaseIterable {
    /// swift-log's `StreamLogHandler`: `2025-06-01T12:00:00+0000 info receiptq.work: job.id=… Message`,
    /// for a person reading a terminal.
    case text
    /// ``JSONLogHandler``: one JSON object per line, for log collectors.
    case json
}
