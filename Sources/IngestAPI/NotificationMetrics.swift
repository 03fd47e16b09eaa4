import Metrics

/// How the notification endpoint answered Apple (`receiptq_notifications_received_total`), every
/// series created up front so that it is exported with zero from the start.
struct NotificationMetrics: Sendable {
    /// The endpoint's answer, as counted.
    enum Result: String, CaseIterable {
        case accepted, duplicate, forged, unauthorized, invalid
        case notFound = "not_found"
        case unavailable
    }

    private let received: [Result: Counter]

    init(factory: any MetricsFactory = MetricsSystem.factory) {
        received = Dictionary(
            uniqueKeysWithValues: Result.allCases.map {
                ($0, Counter(label: "receiptq_notifications_received_total", dimensions: [("result", $0.rawValue)], factory: factory))
            })
    }

    func notificationReceived(_ result: Result) { received[result]?.increment() }
}
