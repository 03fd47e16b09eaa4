import DevTools
import Foundation
import MockAppStore
import ReceiptCore
import ReceiptTesting

/// Plays customers' timelines through a receiptq deployment as a real one sees them: devices post
/// signed transactions when customers buy or restore, the mock App Store changes its ledger and
/// notifies when Apple would, on one simulated clock, with the run's faults. Steps are played in
/// windows of simulated time (a customer's second step in a window waits until the system has
/// settled the first); after each window the deployment settles, then the customers who
/// changed (and a few others, at a random instant) are asked for and compared with the truth. At
/// the end every held notification is released and every customer is checked once more, with the
/// webhook stream each backend received.
public struct ConformanceDriver: Sendable {
    public let target: any ConformanceTarget
    public let clock: SimulatedClock
    public let catalogue: ConformanceCatalogue
    public let faults: Faults
    public let seed: UInt64
    /// The simulated time one window spans.
    public var window: TimeInterval = 6 * 3_600
    /// Apple's environment of the customers' purchases: production, as a live app's are. The
    /// deployment's Server API buckets count the machine's seconds (Apple's limits and
    /// `Retry-After` are the machine's), so in sandbox, a tenth of production's, a compressed year
    /// spent most of its time waiting for Get Transaction History's 5 calls a second.
    public var environment: AppStoreEnvironment = .production
    /// ``environment`` as a signed transaction names it.
    private var environmentName: String { environment == .production ? "Production" : "Sandbox" }
    /// Under ``Faults/workerKilled``: how many times a simulated month the worker process is killed
    /// (at least once a run). Each kill holds the run up by the janitor's few seconds (the next
    /// settling waits for the jobs the dead worker held): at two a month the CI run took 121 s
    /// of its 120, at one 107–112 s.
    public var killsPerMonth: Double = 1
    /// Prints each disagreement as it is found (the command's `--verbose`); the report keeps them all.
    public var log: @Sendable (String) -> Void = { _ in }
    /// Whether the app receives Server Notifications V2 (the deployment's
    /// ``ConformanceDeployment/notifications``). Off, Apple's ledger changes at each step as
    /// before but nothing is posted: a customer whose subscription changed is waiting (a wrong
    /// answer is late) until the deployment has asked Apple about it since (a re-poll or a
    /// device's post; the mock records its answers), and each change's lateness is
    /// ``Faults/Kind/repoll``'s. The clock then passes through the polls due between steps
    /// (``pollHop``), as time would in a real deployment, and at the end runs on until every
    /// change was heard or no poll is left (``RepollPolicy``'s schedule bounds how long).
    public var notifications = true
    /// Without notifications, how far past a due poll the clock jumps at once: the polls due
    /// within it are made together (at most this late), in one settle.
    public var pollHop: TimeInterval = defaultPollHop
    /// ``pollHop``'s default: half an hour, the re-poll policy's longest wait after an expiry.
    public static let defaultPollHop: TimeInterval = 1_800

    public init(target: any ConformanceTarget, clock: SimulatedClock, faults: Faults, seed: UInt64) {
        self.target = target
        self.clock = clock
        self.catalogue = ConformanceCatalogue(bundleID: target.bundleID)
        self.faults = faults
        self.seed = seed
    }

    /// What the driver knows of one customer's purchase: the device's signed transaction, and the
    /// subscription's original transaction id.
    struct Purchase {
        var jws: String
        var original: String
    }

    /// The run's mutable state.
    struct Run {
        var purchases: [Int: Purchase] = [:]
        /// The family member's own transaction of a customer's shared subscription, while shared.
        var members: [Int: Purchase] = [:]
        /// Customers with a notification held back (a wrong answer for them is late, not wrong).
        var delayed: Set<Int> = []
        /// Customers' lost notifications the deployment has not stored yet (a wrong answer for
        /// them is late, not wrong, until the history sweep found them).
        var lost: [Int: Set<String>] = [:]
        /// Each notification a fault made late, by its `notificationUUID`: how it was late.
        var faulted: [String: Faults.Kind] = [:]
        /// Apple's hour of outage (the whole Server API answers 503), when the run plays one.
        var outage: DateInterval?
        /// Device posts made while Apple was down, not yet answered: which customer, and when.
        var outagePosts: [(customer: Int, at: Date)] = []
        /// The steps (by their index in the run's order) whose device post kills the worker process.
        var killAt: Set<Int> = []
        /// Kills due: a device post tries one; a worker that holds no job then is killed at a later post.
        var killsDue = 0
        var windowsHeld = 0
        /// Without notifications: each customer's changes the deployment has not asked Apple about
        /// since (a wrong answer for them is late, not wrong): the subscription, and when.
        var unheard: [Int: [(original: String, at: Date)]] = [:]
        /// Without notifications: customers with a change made while an earlier one of the same
        /// subscription was still unheard (two changes between two polls: no poll saw the first).
        var betweenPolls: Set<Int> = []
        var random: SeededGenerator
        var report = ConformanceReport()
    }

    /// Plays `timelines` and returns the report.
    public func run(_ timelines: [Timeline]) async throws -> ConformanceReport {
        var run = Run(random: SeededGenerator(seed: seed ^ 0xC0FF_EE00))
        for timeline in timelines { run.report.customer(timeline.scenario) }
        let steps = timelines.indices.flatMap { t in timelines[t].steps.indices.map { (timeline: t, step: $0) } }
            .sorted { timelines[$0.timeline].steps[$0.step].at < timelines[$1.timeline].steps[$1.step].at }
        if faults.outage {
            // At a device's post, so that it meets Apple down; drawn before anything else the run draws.
            let posts = steps.filter { timelines[$0.timeline].steps[$0.step].action.isDevicePost }
            if let at = posts.randomElement(using: &run.random).map({ timelines[$0.timeline].steps[$0.step].at }) {
                run.outage = DateInterval(start: at, duration: Self.outageLength)
                target.mock.serverAPI.setOutage(run.outage)
            }
        }
        if faults.workerKilled { run.killAt = killSteps(timelines, steps) }
        var next = 0
        while next < steps.count {
            let end = timelines[steps[next].timeline].steps[steps[next].step].at.addingTimeInterval(window)
            var touched: [Int] = []
            // Notifications held in the last window go out now, late and in reverse order.
            if run.windowsHeld > 0 { release(&run) }
            var lap = ContinuousClock.now
            while next < steps.count, timelines[steps[next].timeline].steps[steps[next].step].at < end {
                let (t, s) = steps[next]
                run.report.phases.lap(\.steps, &lap)
                try await passPolls(&run, before: timelines[t].steps[s].at)
                try await catchUp(&run, before: timelines[t].steps[s].at, again: touched.contains(t))
                run.report.phases.lap(\.settling, &lap)
                clock.jump(to: timelines[t].steps[s].at)
                if run.killAt.contains(next) { run.killsDue += 1 }
                try await play(timelines[t].steps[s].action, of: timelines[t], &run)
                if !touched.contains(t) { touched.append(t) }
                next += 1
            }
            if !run.delayed.isEmpty { run.windowsHeld += 1 }
            run.report.phases.lap(\.steps, &lap)
            let following = next < steps.count ? timelines[steps[next].timeline].steps[steps[next].step].at : nil
            // While Apple is down the workers' retries cannot end: the deployment settles once the
            // outage is over, and the next step inside it is played first.
            guard try await outlast(&run, before: following) else {
                run.report.phases.lap(\.settling, &lap)
                continue
            }
            try await recoverLost(&run, before: following)
            try await target.settle()
            try await forgetStored(&run)
            forgetHeard(&run)
            answeredAfterOutage(&run)
            run.report.phases.lap(\.settling, &lap)
            let others = (0..<min(3, timelines.count)).map { _ in Int.random(in: 0..<timelines.count, using: &run.random) }
            for t in touched + others.filter({ !touched.contains($0) }) { try await check(timelines[t], &run, final: false) }
            run.report.phases.lap(\.checks, &lap)
        }
        var lap = ContinuousClock.now
        // The model's horizon: nothing is planned past its last step.
        let horizon = steps.last.map { timelines[$0.timeline].steps[$0.step].at } ?? clock.now()
        release(&run)
        _ = try await outlast(&run, before: nil)
        try await target.settle()
        answeredAfterOutage(&run)
        try await recoverLost(&run, before: nil)
        try await target.settle()
        try await forgetStored(&run)
        forgetHeard(&run)
        let runEnd = clock.now()
        if !notifications {
            // Asked at the last step's time too: the clock then runs on until the last changes
            // are heard, by when most subscriptions have ended and their answers are empty.
            for timeline in timelines { try await check(timeline, &run, final: false) }
            try await passPolls(&run, before: nil)
            for (_, changes) in run.unheard { for _ in changes { run.report.late(.repoll, by: nil) } }
        }
        var counts: [String: Int] = [:]
        for timeline in timelines {
            for (index, user) in timeline.users.enumerated() { counts[user] = timeline.expectedEvents(user: index).count }
        }
        try await target.awaitEvents(counts)
        let sentByUUID = Dictionary(target.mock.notifications.sent.map { ($0.uuid, $0) }) { first, _ in first }
        for (uuid, kind) in run.faulted {
            guard let sent = sentByUUID[uuid] else { continue }
            run.report.late(kind, by: sent.heard.map { $0.timeIntervalSince(sent.signedDate) })
        }
        let received = target.receivedEvents()
        run.report.repeatedDeliveries = received.repeats
        run.report.workerKillsUndone = run.killsDue
        for timeline in timelines {
            try await check(timeline, &run, final: true)
            for user in timeline.users.indices {
                // The clock ran on past the timelines' end (without notifications, until the last
                // changes were heard; with them, for the history sweep to find lost ones, and its
                // re-polls with it): a subscription the model left running lapsed meanwhile (one
                // in Billing Grace Period goes on to billing retry at its end: no expiry).
                let end = notifications ? horizon : runEnd
                let inGrace =
                    timeline.steps.last { $0.at <= end }.map {
                        if case .failToRenew = $0.action { true } else { false }
                    } ?? false
                let lapsed = !inGrace && timeline.truth(user: user, at: end).contains { $0.until.map { $0 <= clock.now() } ?? false }
                run.report.events(
                    timeline, user: user, received: received.byUser[timeline.users[user], default: []],
                    polled: notifications ? nil : .init(lapsedAfterEnd: lapsed, betweenPolls: run.betweenPolls.contains(timeline.customer)),
                    lapsedAfterEnd: notifications && lapsed)
            }
        }
        run.report.phases.lap(\.final, &lap)
        return run.report
    }

    /// The device posts at which the worker process is killed: ``killsPerMonth`` a simulated month
    /// of the run's span, drawn from a generator of their own (the other faults' draws stay those
    /// of the same seed without kills).
    private func killSteps(_ timelines: [Timeline], _ steps: [(timeline: Int, step: Int)]) -> Set<Int> {
        let posts = steps.indices.filter { timelines[steps[$0].timeline].steps[steps[$0].step].action.isDevicePost }
        guard let first = steps.first, let last = steps.last else { return [] }
        let span = timelines[last.timeline].steps[last.step].at.timeIntervalSince(timelines[first.timeline].steps[first.step].at)
        let kills = min(posts.count, max(1, Int((span / Lifecycle.month * killsPerMonth).rounded())))
        var random = SeededGenerator(seed: seed ^ 0x4B11_1ED0)
        return Set(posts.shuffled(using: &random).prefix(kills))
    }

    /// Lets the deployment's history sweep find the lost notifications: moves the clock past the
    /// sweep's next run (an interval and a minute on), as time would pass in a real deployment,
    /// and waits until they are stored. Only if that instant comes before `before` (the next
    /// step: the clock never passes a step not played); else they wait for a later window,
    /// their customers' answers late meanwhile.
    private func recoverLost(_ run: inout Run, before: Date?) async throws {
        guard !run.lost.isEmpty else { return }
        let due = clock.now().addingTimeInterval(target.historySweepInterval + 60)
        if let before, due >= before { return }
        clock.jump(to: due)
        try await target.awaitStored(notifications: Set(run.lost.values.joined()))
    }

    /// How long Apple's outage lasts, in simulated time.
    static let outageLength: TimeInterval = 3_600

    /// When the clock is inside Apple's outage: moves it to the outage's end if no step comes
    /// before (then the deployment can settle: true), else leaves it (false: the window's
    /// answers are not asked for, as the system could not have heard from Apple).
    private func outlast(_ run: inout Run, before: Date?) async throws -> Bool {
        guard let outage = run.outage, clock.now() < outage.end, clock.now() >= outage.start else { return true }
        if let before, before < outage.end { return false }
        clock.jump(to: outage.end)
        return true
    }

    /// Before a step at `step`: a customer's second step in a window (`again`) lets the deployment
    /// settle first, as the hours between them would in a real deployment (a post Apple refused
    /// with a 5xx or 429 is retried within seconds). Without it the hours took no time of the
    /// machine's: a second app user's restore was judged before the first user's purchase, refused
    /// once by Apple, and took the subscription (`shared_apple_account` under `all`). Inside
    /// Apple's outage nothing can settle: a step past its end first moves the clock to the end and
    /// settles there; a step inside it is played at once.
    private func catchUp(_ run: inout Run, before step: Date, again: Bool) async throws {
        if let outage = run.outage, clock.now() >= outage.start, clock.now() < outage.end {
            guard step >= outage.end else { return }
            clock.jump(to: outage.end)
            try await target.settle()
            answeredAfterOutage(&run)
            return
        }
        // The customer's last step, hours earlier in simulated time, may still be in flight in real
        // time (a post retried after Apple's 429, a notification on its way): the system hears of it
        // first, as it would have in those hours. Other customers' steps need no wait: settling
        // before every jump made a run several times longer.
        if again { try await target.settle() }
    }

    /// Counts how late the posts made during the outage were answered: from the post until the
    /// deployment settled after it (an upper bound: the answer changed somewhere in between).
    private func answeredAfterOutage(_ run: inout Run) {
        guard let outage = run.outage, clock.now() >= outage.end else { return }
        let now = clock.now()
        for post in run.outagePosts { run.report.late(.outage, by: now.timeIntervalSince(post.at)) }
        run.outagePosts.removeAll()
    }

    /// Forgets the lost notifications the deployment has stored (the history sweep found them):
    /// their customers' answers must be right again.
    private func forgetStored(_ run: inout Run) async throws {
        guard !run.lost.isEmpty else { return }
        let stored = try await target.stored(notifications: Set(run.lost.values.joined()))
        for customer in Array(run.lost.keys) {
            run.lost[customer]?.subtract(stored)
            if run.lost[customer]?.isEmpty == true { run.lost[customer] = nil }
        }
    }

    private func release(_ run: inout Run) {
        _ = target.mock.notifications.release(order: "reverse")
        run.delayed.removeAll()
        run.windowsHeld = 0
    }

    /// Asks for every user of `timeline` and compares with the truth at the moment of asking.
    private func check(_ timeline: Timeline, _ run: inout Run, final: Bool) async throws {
        for (index, user) in timeline.users.enumerated() {
            let at = clock.now()
            let expected = timeline.truth(user: index, at: at)
            let answered = ConformanceCheck.entitlements(fromCustomer: try await target.customer(user))
            let waiting =
                run.delayed.contains(timeline.customer) || run.lost[timeline.customer] != nil || run.unheard[timeline.customer] != nil
            let verdict: AnswerVerdict = ConformanceCheck.agrees(expected, answered) ? .right : !final && waiting ? .late : .wrong
            if verdict != .right { log("\(verdict) answer for \(user) at \(at): expected \(expected) answered \(answered)") }
            run.report.answer(timeline, verdict, at: at, expected: expected, answered: answered)
        }
    }

    /// How the next notification is delivered under the run's faults: a fifth held back, a
    /// tenth lost (of those not held).
    private func delivery(for customer: Int, _ run: inout Run) -> MockNotificationCenter.Delivery {
        let hold = faults.delayedAndReordered && Double.random(in: 0..<1, using: &run.random) < 0.2
        let lost = !hold && faults.lostNotifications && Double.random(in: 0..<1, using: &run.random) < 0.1
        if hold { run.delayed.insert(customer) }
        return MockNotificationCenter.Delivery(copies: faults.duplicates ? 2 : 1, hold: hold, lost: lost)
    }

    private func play(_ action: Action, of timeline: Timeline, _ run: inout Run) async throws {
        let api = target.mock.serverAPI
        let center = target.mock.notifications
        let customer = timeline.customer
        func notify(
            _ type: String, _ subtype: String? = nil, about id: String? = nil, period: TimeInterval? = nil,
            revocation: MockNotificationCenter.Revocation? = nil
        ) throws {
            guard let purchase = run.purchases[customer] else { throw ConformanceError.noPurchase(customer) }
            // Without notifications nothing is posted (the app has no URL): no delivery to fault.
            let delivery = notifications ? delivery(for: customer, &run) : MockNotificationCenter.Delivery()
            let uuid = try center.event(
                type: type, subtype: subtype, transactionID: id ?? purchase.original, environment: environment, delivery: delivery,
                revocation: revocation, period: period)
            guard let uuid else { return }
            if !notifications {
                // Apple's ledger changed now (the clock is read after): news to the deployment
                // until it next asks Apple about the subscription.
                if let original = api.originalTransactionID(of: id ?? purchase.original, in: environment) {
                    if run.unheard[customer]?.contains(where: { $0.original == original }) == true { run.betweenPolls.insert(customer) }
                    run.unheard[customer, default: []].append((original, clock.now()))
                }
                return
            }
            if delivery.lost {
                run.lost[customer, default: []].insert(uuid)
                run.faulted[uuid] = .lost
            } else if delivery.hold {
                run.faulted[uuid] = .delayed
            }
        }
        switch action {
        case .purchase(let product, let offer, let user):
            var fields = offer?.transactionFields ?? [:]
            if product == .coins { fields["type"] = .string("Consumable") }
            let days = product.isSubscription ? (offer?.firstPeriod ?? Lifecycle.month) / 86_400 : nil
            let (jws, payload) = try ReceiptForger.signedTransaction(
                bundleID: target.bundleID, productID: catalogue.productID(product), days: days, environment: environmentName,
                authority: api.authority, now: clock.now(), fields: fields)
            api.add(transactions: [payload], environment: environment)
            run.purchases[customer] = Purchase(jws: jws, original: payload["originalTransactionId"]?.stringValue ?? "")
            try await post(jws, user: timeline.users[user], customer: customer, &run)
            // An offer code's redemption is told by a notification too.
            if offer == .offerCode { try notify("OFFER_REDEEMED", "INITIAL_BUY") }
        case .restore(let user):
            guard let purchase = run.purchases[customer] else { throw ConformanceError.noPurchase(customer) }
            // Another app user's device holds its own copy, signed when it asked (a later
            // signedDate); the same user's second device may hold the very same bytes.
            let jws = user == 0 ? purchase.jws : try resigned(purchase.jws)
            try await post(jws, user: timeline.users[user], customer: customer, &run)
        case .renew:
            try notify("DID_RENEW", period: Lifecycle.month)
            // A family member's own transaction renews with the organiser's, and Apple tells of it too.
            if let member = run.members[customer] { try notify("DID_RENEW", about: member.original, period: Lifecycle.month) }
        case .autoRenewOff:
            try notify("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED")
        case .failToRenew(let grace):
            try notify("DID_FAIL_TO_RENEW", grace ? "GRACE_PERIOD" : nil)
        case .recover:
            try notify("DID_RENEW", "BILLING_RECOVERY", period: Lifecycle.month)
        case .expire(let intent):
            try notify("EXPIRED", intent.subtype)
        case .refund:
            try notify("REFUND", about: latest(of: customer, run))
        case .refundDeclined:
            try notify("REFUND_DECLINED", about: latest(of: customer, run))
        case .refundReversed:
            try notify("REFUND_REVERSED", about: latest(of: customer, run))
        case .proratedRefund(let share):
            try notify("REFUND", about: latest(of: customer, run), revocation: .prorated(share))
        case .familyShare(let user):
            guard let purchase = run.purchases[customer], let shared = api.latestTransaction(of: purchase.original, in: environment) else {
                throw ConformanceError.noPurchase(customer)
            }
            // The member's own transaction: its own ids, the organiser's product and period's end.
            let fields: [String: JSONValue] = ["inAppOwnershipType": .string("FAMILY_SHARED"), "expiresDate": shared["expiresDate"] ?? .null]
            let (jws, payload) = try ReceiptForger.signedTransaction(
                bundleID: target.bundleID, productID: shared["productId"]?.stringValue ?? "", days: Lifecycle.month / 86_400,
                environment: environmentName, authority: api.authority, now: clock.now(), fields: fields)
            api.add(transactions: [payload], environment: environment)
            run.members[customer] = Purchase(jws: jws, original: payload["originalTransactionId"]?.stringValue ?? "")
            try await post(jws, user: timeline.users[user], customer: customer, &run)
        case .revoke:
            guard let member = run.members.removeValue(forKey: customer) else { throw ConformanceError.noPurchase(customer) }
            try notify("REVOKE", about: api.latestTransactionID(of: member.original, in: environment))
        case .downgrade(let product):
            guard let purchase = run.purchases[customer] else { throw ConformanceError.noPurchase(customer) }
            // The renewal info names the product the next period will be; the current one runs on.
            api.setRenewal(
                ["autoRenewProductId": .string(catalogue.productID(product))], originalTransactionID: purchase.original, environment: environment)
            try notify("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE")
        case .autoRenewOn:
            try notify("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED")
        case .extend(let days):
            try notify("RENEWAL_EXTENDED", period: Double(days) * 86_400)
        case .priceIncrease(let accepted):
            guard let purchase = run.purchases[customer] else { throw ConformanceError.noPurchase(customer) }
            // The next renewal's price, as the renewal info states it from the announcement on.
            if !accepted {
                api.setRenewal(["renewalPrice": .number(12_990)], originalTransactionID: purchase.original, environment: environment)
            }
            try notify("PRICE_INCREASE", accepted ? "ACCEPTED" : "PENDING")
        case .resubscribe(let offer):
            guard let purchase = run.purchases[customer], let first = api.latestTransaction(of: purchase.original, in: environment) else {
                throw ConformanceError.noPurchase(customer)
            }
            // The same subscription bought again: its original transaction, a new period from now.
            var fields = offer?.transactionFields ?? [:]
            fields["originalTransactionId"] = .string(purchase.original)
            fields["originalPurchaseDate"] = first["originalPurchaseDate"]
            let (jws, payload) = try ReceiptForger.signedTransaction(
                bundleID: target.bundleID, productID: first["productId"]?.stringValue ?? "", days: (offer?.firstPeriod ?? Lifecycle.month) / 86_400,
                environment: environmentName, authority: api.authority, now: clock.now(), fields: fields)
            api.add(transactions: [payload], environment: environment)
            run.purchases[customer]?.jws = jws
            try await post(jws, user: timeline.users[0], customer: customer, &run)
            try notify("SUBSCRIBED", "RESUBSCRIBE")
        case .upgrade(let product):
            guard let purchase = run.purchases[customer] else { throw ConformanceError.noPurchase(customer) }
            let (_, payload) = try ReceiptForger.signedTransaction(
                bundleID: target.bundleID, productID: catalogue.productID(product), days: Lifecycle.month / 86_400,
                environment: environmentName, authority: api.authority, now: clock.now(),
                fields: ["originalTransactionId": .string(purchase.original), "transactionReason": .string("PURCHASE")])
            api.add(transactions: [payload], environment: environment)
            try notify("DID_CHANGE_RENEWAL_PREF", "UPGRADE", about: payload["transactionId"]?.stringValue)
        }
    }

    /// The customer's subscription's latest transaction (the one a refund is about).
    private func latest(of customer: Int, _ run: Run) throws -> String? {
        guard let purchase = run.purchases[customer] else { throw ConformanceError.noPurchase(customer) }
        return target.mock.serverAPI.latestTransactionID(of: purchase.original, in: environment)
    }

    /// `jws`'s transaction signed again now, as Apple signs it for another device.
    private func resigned(_ jws: String) throws -> String {
        var payload = try JSONValue.parse(try CompactJWS(jws).payload).objectValue ?? [:]
        payload["signedDate"] = .number((clock.now().timeIntervalSince1970 * 1000).rounded())
        return try target.mock.serverAPI.authority.sign(.object(payload))
    }

    /// A device's post; under the `appleErrors` fault Apple first answers the worker's call with a
    /// 5xx or a 429 now and then.
    private func post(_ jws: String, user: String, customer: Int, _ run: inout Run) async throws {
        if let outage = run.outage, outage.start <= clock.now(), clock.now() < outage.end {
            run.outagePosts.append((customer, clock.now()))
        }
        if faults.appleErrors, Double.random(in: 0..<1, using: &run.random) < 0.2 {
            let status = Bool.random(using: &run.random) ? 503 : 429
            // Apple's Retry-After is an instant of the machine's clock, which the worker's pauses keep:
            // 200 ms on (a second made the waits for it a fifth of the CI run's settling).
            let retryAfter = status == 429 ? Int64((Date().timeIntervalSince1970 + 0.2) * 1000) : nil
            target.mock.serverAPI.addRule(
                MockServerAPIState.Rule(count: 1, httpStatus: status, errorCode: status == 429 ? 4_290_000 : nil, retryAfterMs: retryAfter))
        }
        let status: Int
        if run.killsDue > 0 {
            // The post in flight while the worker is killed: its job may be one the dead worker
            // held, and then it is answered once the janitor gave it back and a worker ran it.
            let posting = Task { [target] in try await target.postTransaction(jws, user: user) }
            if let held = try await target.killWorker() {
                // The job it was seen holding may have been settled before the signal landed (a
                // loaded machine): a kill that left nothing to take back tested nothing, and the
                // next post tries again.
                if held > 0 { run.killsDue -= 1 }
                run.report.workerKilled(holding: held)
            }
            status = try await posting.value
        } else {
            status = try await target.postTransaction(jws, user: user)
        }
        guard (200..<300).contains(status) else { throw ConformanceError.postRefused(user: user, status: status) }
    }
}

/// Why a run stopped.
public enum ConformanceError: Error, Equatable {
    /// A step about a purchase came before the customer bought (a defect of the model).
    case noPurchase(Int)
    /// The deployment refused a device's post.
    case postRefused(user: String, status: Int)
}
