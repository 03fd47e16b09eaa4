/// Every row, in the order `scripts/bench` runs them when given none. Add new rows here.
enum BenchRows {
    static var all: [any BenchRow.Type] {
        [
            ReceiptRow.self,
            JWSRow.self,
            QueueOnlyRow.self,
            PipelineRow.self,
            IngestRow.self,
            SchedulerRow.self,
            NotificationsRow.self,
            WebhooksRow.self,
            OutboxRow.self,
            PeerSidekiqRow.self,
            PipelineScaleRow.self,
        ]
    }
}
