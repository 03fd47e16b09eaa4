/// Every row, in the order `scripts/bench` runs them when given none. Add new rows here.
enum BenchRows {
    static var all: [any BenchRow.Type] {
        [
            ReceiptRow.self,
            JWSRow.self,
            QueueOnlyRow.self,
            PipelineRow.self,
            IngestRow.self,
            ImportRow.self,
            ImportLiveRow.self,
            SchedulerRow.self,
            NotificationsRow.self,
            WebhooksRow.self,
            OutboxRow.self,
            RevenueMetricsRow.self,
            PeerSidekiqRow.self,
            PipelineScaleRow.self,
            // ~10 min: 30 compressed days of traffic with short retention.
            RetentionRow.self,
            // Minutes: a simulated year of 1,000 customers through a whole deployment.
            ConformanceRow.self,
            // Last: its first run loads 10 M receipts (~30 min); later runs reuse them.
            PipelineHistoryRow.self,
        ]
    }
}
