import Foundation
import Logging
import ReceiptCore

/// The refund defence: a consumption request's answer job reads the facts, asks the pure rule
/// (``RefundDefence``) for the body, sends it with the app's key, and plans on Apple's answer.
extension WorkerEngine {
    func startConsumption(
        _ token: Int, _ job: ReservedJob, _ envelope: JobEnvelope, _ consumption: ConsumptionJob, store: (any WorkerStore)?,
        using generator: inout SystemRandomNumberGenerator
    ) {
        let app: AppRecord?
        let facts: ConsumptionFacts
        do {
            guard let store else { throw StoreFailure(code: .unavailable, message: "no connection") }
            app = try store.app(id: envelope.appID)
            facts = try store.consumptionFacts(
                appID: envelope.appID, environment: consumption.environment, transactionID: consumption.transactionID,
                notificationID: consumption.notificationID)
        } catch {
            logger.warning("Consumption request's facts unreadable", error: error)
            return decide(token, job, planner.storeUnavailable(envelope, calls: [], using: &generator))
        }
        guard let app else { return decide(token, job, planner.unknownApp(envelope)) }
        switch planner.consumptionStart(envelope, consumption, facts: facts) {
        case .settle(let plan):
            return decide(token, job, plan)
        case .send(let body):
            // Two copies of one request (Apple's retry, a replay) may both be stored and reach
            // here together: the claim lets one of them send.
            do {
                guard
                    try store?.claimConsumption(
                        appID: envelope.appID, notificationID: consumption.notificationID, transactionID: consumption.transactionID,
                        job: envelope.id) == true
                else { return decide(token, job, .answer(envelope, nil)) }
            } catch {
                logger.warning("Consumption request's claim failed", error: error)
                return decide(token, job, planner.storeUnavailable(envelope, calls: [], using: &generator))
            }
            guard let sender = self.consumption else {
                return decide(
                    token, job,
                    .bury(
                        envelope.failed(
                            code: .consumptionNotConfigured, message: "this worker cannot answer consumption requests", calls: [], at: now())))
            }
            let environment: AppStoreEnvironment = consumption.environment == "sandbox" ? .sandbox : .production
            sender.send(body, transactionID: consumption.transactionID, app: app, environment: environment) { report in
                var rng = SystemRandomNumberGenerator()
                let plan = self.planner.consumption(envelope, consumption, facts: facts, body: body, report: report, using: &rng)
                self.decide(token, job, plan)
            }
        }
    }
}
