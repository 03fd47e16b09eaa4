import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Refund defence: the consumption body a policy makes of the facts, and its job's plans (mock clock)")
struct RefundDefenceTests {
    let consenting = CustomerConsumption(consented: true, consumptionPercentage: 40_000, sampleContentProvided: true, playTimeSeconds: 7200)

    func facts(_ policy: ConsumptionPolicy, customer: CustomerConsumption? = nil, refunded: Int = 0, known: Bool = true) -> ConsumptionFacts {
        ConsumptionFacts(
            policy: policy, purchaseKnown: known, userIdentifier: "u1", lifetimeSpendMilli: 120_000, currency: "EUR", refundedPurchases: refunded,
            customer: customer ?? consenting)
    }

    @Test("off, no consent, or answered already: nothing is sent")
    func skips() {
        #expect(RefundDefence.decide(facts(.off)) == .skip(.policyOff))
        #expect(RefundDefence.decide(facts(.preferDecline, customer: CustomerConsumption(consented: false))) == .skip(.noConsent))
        var silent = facts(.neutral)
        silent.customer = nil
        #expect(RefundDefence.decide(silent) == .skip(.noConsent))
        var answered = facts(.preferGrant)
        answered.alreadyAnswered = true
        #expect(RefundDefence.decide(answered) == .skip(.alreadyAnswered))
    }

    @Test("Each policy's preference over the same facts; an undelivered purchase is never defended")
    func preferences() {
        func preference(_ facts: ConsumptionFacts) -> RefundPreference?? {
            guard case .send(let body) = RefundDefence.decide(facts) else { return .none }
            return .some(body.refundPreference)
        }
        #expect(preference(facts(.neutral)) == .some(nil))
        #expect(preference(facts(.preferDecline)) == .some(.decline))
        // Partly used: prorated; unused by a customer never refunded: full.
        #expect(preference(facts(.preferGrant)) == .some(.grantProrated))
        #expect(preference(facts(.preferGrant, customer: CustomerConsumption(consented: true, consumptionPercentage: 0))) == .some(.grantFull))
        #expect(
            preference(facts(.preferGrant, customer: CustomerConsumption(consented: true, consumptionPercentage: 0), refunded: 2))
                == .some(.grantProrated))
        let broken = CustomerConsumption(consented: true, deliveryStatus: .undeliveredServerOutage)
        #expect(preference(facts(.preferDecline, customer: broken)) == .some(.grantFull))
        // A purchase receiptq never saw was not delivered through it.
        #expect(preference(facts(.preferDecline, customer: CustomerConsumption(consented: true), known: false)) == .some(.grantFull))
    }

    @Test("The body carries Apple's v2 fields: consent, delivery, sample, consumption clamped to 0…100 000 milli-percent")
    func body() throws {
        let over = CustomerConsumption(consented: true, consumptionPercentage: 250_000, sampleContentProvided: false)
        guard case .send(let body) = RefundDefence.decide(facts(.preferDecline, customer: over)) else {
            Issue.record("nothing sent")
            return
        }
        #expect(
            body.json
                == .object([
                    "customerConsented": .bool(true), "deliveryStatus": .string("DELIVERED"), "sampleContentProvided": .bool(false),
                    "consumptionPercentage": .number(100_000), "refundPreference": .string("DECLINE"),
                ]))
        guard case .send(let neutral) = RefundDefence.decide(facts(.neutral, customer: CustomerConsumption(consented: true))) else {
            Issue.record("nothing sent")
            return
        }
        #expect(neutral.json["consumptionPercentage"] == nil && neutral.json["refundPreference"] == nil)
    }

    @Test("Lifetime spend bands")
    func bands() {
        #expect(LifetimeSpendBand(milli: 0) == .none)
        #expect(LifetimeSpendBand(milli: 49_999) == .under50)
        #expect(LifetimeSpendBand(milli: 50_000) == .under500)
        #expect(LifetimeSpendBand(milli: 500_000) == .over500)
    }

    // MARK: The job

    let clock = MockClock()
    var planner: JobPlanner { JobPlanner(retryPolicy: RetryPolicy(), now: clock.closure) }

    func job(deadlineIn seconds: TimeInterval) -> (JobEnvelope, ConsumptionJob) {
        let job = ConsumptionJob(
            notificationID: "n-1", transactionID: "2000000001", deadline: clock.now.addingTimeInterval(seconds), bundleID: "com.example",
            environment: "sandbox")
        return (JobEnvelope(id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: .api, payload: .consumption(job)), job)
    }

    @Test("Apple's real CONSUMPTION_REQUEST (production, a consumable) becomes its answer's job, due 12 hours after Apple signed it")
    func realRequestBecomesItsAnswersJob() throws {
        let root = try #require(TestEnvironment.appStoreTestData)
        let file = root.appendingPathComponent("notifications/gopay-v2-consumption_request-production.json")
        let body = try JSONValue.parse(Array(try Data(contentsOf: file)))
        let jws = try #require(body["signedPayload"]?.stringValue)
        let decoded = try AppleNotification.v2(signedPayload: jws)
        #expect(decoded.type == "CONSUMPTION_REQUEST" && decoded.environment == "production")
        let transactionID = try #require(decoded.transaction?["transactionId"]?.stringValue)
        let envelope = JobEnvelope(
            id: JobID.make(), appID: UUID(), enqueuedAt: clock.now, origin: .apple,
            payload: .notification(NotificationJob(notificationID: decoded.uuid, body: jws, environment: "production")))
        var rng = SeededGenerator(seed: 3)
        guard case .store(let record) = planner.notification(envelope, NotificationJob(notificationID: decoded.uuid, body: jws), using: &rng),
            let next = record.followUp, case .consumption(let job) = next.payload
        else {
            Issue.record("no answer job")
            return
        }
        #expect(job.notificationID == decoded.uuid && job.transactionID == transactionID && job.environment == "production")
        #expect(job.deadline == decoded.signedDate.addingTimeInterval(12 * 3600))
        #expect(next.id == envelope.id && next.kind == .notification && record.purchases.isEmpty)
    }

    @Test("The job survives the queue's bytes: its deadline, transaction and request")
    func wire() throws {
        let (envelope, _) = job(deadlineIn: 3600)
        #expect(try JobEnvelope.decode(envelope.encoded()) == envelope)
        #expect(try JobEnvelope.decodeWithFoundation(envelope.encoded()) == envelope)
        #expect(envelope.kind == .notification)
    }

    @Test("Past Apple's deadline the job is a dead letter with its code, before any call")
    func deadlineAtStart() {
        let (envelope, job) = job(deadlineIn: 60)
        clock.advance(by: 61)
        guard case .settle(.bury(let failed?)) = planner.consumptionStart(envelope, job, facts: facts(.preferDecline)) else {
            Issue.record("not buried")
            return
        }
        #expect(failed.errorCode == .consumptionDeadlinePassed)
        // Policy off settles without a call, whatever the clock.
        #expect(planner.consumptionStart(envelope, job, facts: facts(.off)) == .settle(.answer(envelope, nil)))
    }

    @Test("A 5xx is retried while the deadline allows, a dead letter once the next try would be late; 2xx is the answer")
    func retries() throws {
        var rng = SeededGenerator(seed: 7)
        let (envelope, job) = job(deadlineIn: 12 * 3600)
        let sent = facts(.preferDecline)
        guard case .send(let body) = planner.consumptionStart(envelope, job, facts: sent) else {
            Issue.record("nothing to send")
            return
        }
        let retried = planner.consumption(envelope, job, facts: sent, body: body, report: .transient(.http(503)), using: &rng)
        guard case .retry(let again, let runAt, .retried) = retried else {
            Issue.record("not retried: \(retried)")
            return
        }
        #expect(runAt < job.deadline && again.errorCode == .http(503))
        // Due now, and no try can be earlier than now: the next one would be late.
        let (late, lateJob) = self.job(deadlineIn: 0)
        let buried = planner.consumption(late, lateJob, facts: sent, body: body, report: .transient(.http(500)), using: &rng)
        guard case .bury(let failed?) = buried else {
            Issue.record("not buried: \(buried)")
            return
        }
        #expect(failed.errorCode == .consumptionDeadlinePassed)
        let accepted = planner.consumption(envelope, job, facts: sent, body: body, report: .accepted, using: &rng)
        guard case .answer(_, let answer?) = accepted else {
            Issue.record("not answered: \(accepted)")
            return
        }
        #expect(answer.body == body && answer.policy == .preferDecline && answer.spendBand == .under500 && answer.playTimeSeconds == 7200)
        #expect(answer.event(id: UUID()).type == .refundConsumptionSent)
    }
}
