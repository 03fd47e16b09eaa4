import Metrics

/// What the ingestion API counts beyond its HTTP metrics: how the notification endpoint answered
/// Apple (`receiptq_notifications_received_total`) and what became of bulk imports' items
/// (`receiptq_import_items_total`), every series created up front so that it is exported with
/// zero from the start.
struct IngestMetrics: Sendable {
    /// The notification endpoint's answer, as counted.
    enum NotificationResult: String, CaseIterable {
        case accepted, duplicate, forged, unauthorized, invalid
        case notFound = "not_found"
        case unavailable
    }

    /// A batch item's category (``BatchItemResult/category``).
    static let importResults = ["accepted", "duplicate", "fraud", "invalid", "unavailable"]

    private let received: [NotificationResult: Counter]
    private let importItems: [String: Counter]

    init(factory: any MetricsFactory = MetricsSystem.factory) {
        received = Dictionary(
            uniqueKeysWithValues: NotificationResult.allCases.map {
                ($0, Counter(label: "receiptq_notifications_received_total", dimensions: [("result", $0.rawValue)], factory: factory))
            })
        importItems = Dictionary(
            uniqueKeysWithValues: Self.importResults.map {
                ($0, Counter(label: "receiptq_import_items_total", dimensions: [("result", $0)], factory: factory))
            })
    }

    func notificationReceived(_ result: NotificationResult) { received[result]?.increment() }

    /// A batch's items, counted by category (one increment per category, not per item).
    func importItems(_ counts: [String: Int]) {
        for (category, count) in counts { importItems[category]?.increment(by: Int64(count)) }
    }
}
