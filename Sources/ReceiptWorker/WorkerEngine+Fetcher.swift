import Foundation
import Logging
import ReceiptCore

/// The fetcher: one thread that reserves jobs from Redis and starts each one's call, and the
/// lookups a start needs (the app, the webhook endpoint, the circuit), all on its own connections.
///
/// It keeps a few jobs reserved *ahead* (a quarter of `concurrency`, refilled in batches once half
/// are gone): when a call is answered, its slot starts the next job at once instead of after a
/// Redis round trip. Those jobs are in the processing list and in flight like the others, so the
/// stray check keeps them, and graceful shutdown gives them back to the queue unstarted.
extension WorkerEngine {
    /// How many more bulk imports' validations may be reserved: their share of the slots
    /// (`importShare` of `concurrency`, at least one when the share is not 0) less those in flight.
    func importRoom() -> Int {
        guard configuration.importShare > 0 else { return 0 }
        let share = max(1, Int(Double(configuration.concurrency) * configuration.importShare))
        let held = locked { $0.inFlight.values.reduce(0) { $0 + ($1.envelope?.importID == nil ? 0 : 1) } }
        return max(0, share - held)
    }

    /// How many jobs the fetcher keeps reserved ahead of the free slots.
    var aheadTarget: Int { max(1, min(configuration.fetchBatch, configuration.concurrency / 4)) }

    func runFetcher() {
        var queue: (any JobQueue)?
        var store: (any WorkerStore)?
        var gate: CircuitGate?
        var lifecycle: VerifyReceiptGate?
        let budget = ImportBudgetGate(rate: configuration.importRatePerSecond, make: makeImportBudget)
        var lastHeartbeat = Date.distantPast
        // Pacing uses the machine's clock: an injected clock that stands still would stop the flushes.
        var lastFlush: ContinuousClock.Instant?
        var mayHoldStrays = true
        var pause = 0.1
        var rng = SystemRandomNumberGenerator()
        /// Reserved and in flight, not started yet (oldest first).
        var ahead: [(token: Int, job: ReservedJob)] = []
        while !locked({ $0.stopping }) {
            do {
                if gate == nil { gate = CircuitGate(circuit: try makeCircuit(), refreshInterval: configuration.circuitRefresh) }
                if lifecycle == nil { lifecycle = VerifyReceiptGate(watch: try makeWatch(), goneAfter: configuration.verifyReceiptGoneAfter) }
                if queue == nil { queue = try makeQueue("fetcher") }
                guard let queue, let gate, let lifecycle else { continue }
                if store == nil { store = try? makeStore("fetcher") }
                if lastFlush.map({ ContinuousClock.now - $0 >= configuration.circuitFlush }) ?? true {
                    flush(gate)
                    flush(lifecycle)
                    lastFlush = .now
                }
                if now().timeIntervalSince(lastHeartbeat) >= configuration.heartbeatInterval.seconds {
                    try queue.heartbeat(busy: inFlightCount)
                    lastHeartbeat = now()
                    // Every beat also looks: a settle lost in a failover may surface only once
                    // every connection has moved to the new primary, after the error that
                    // asked for a reconcile was handled.
                    mayHoldStrays = true
                }
                if mayHoldStrays || locked({ $0.reconcileDue }) {
                    locked { $0.reconcileDue = false }
                    try reconcile(queue)
                    mayHoldStrays = false
                }
                let (calls, room) = waitForWork(ahead: ahead.count)
                guard calls > 0, !ahead.isEmpty || room > 0 else { continue }
                let starting = min(calls, ahead.count)
                start(Array(ahead.prefix(starting)), store: store, gate: gate, lifecycle: lifecycle, budget: budget, using: &rng)
                ahead.removeFirst(starting)
                // Jobs for the slots still free, and a batch for the buffer once it is half empty.
                let refill = ahead.count * 2 <= aheadTarget ? aheadTarget - ahead.count : 0
                let wanted = min(room, calls - starting + refill, configuration.fetchBatch)
                guard wanted > 0 else { continue }
                // Only a free slot with nothing to start waits for a job to arrive.
                let jobs = try queue.reserve(
                    max: wanted, background: budget.isPaused(now: now()) ? 0 : importRoom(),
                    timeout: calls > starting ? configuration.reserveTimeout : .zero)
                let registered = Array(zip(register(jobs), jobs))
                let startingNow = min(registered.count, calls - starting)
                start(
                    registered.prefix(startingNow).map { (token: $0.0, job: $0.1) }, store: store, gate: gate, lifecycle: lifecycle,
                    budget: budget, using: &rng)
                ahead += registered.dropFirst(startingNow).map { (token: $0.0, job: $0.1) }
                pause = 0.1
            } catch {
                // Redis unreachable: back off (bounded) and try again; the façade reconnects on the
                // next call. A reserve that failed may still have moved a job: look for strays first.
                mayHoldStrays = true
                logger.warning("Worker fetch error", error: error)
                sleepUnlessStopping(pause)
                pause = min(pause * 2, 5)
            }
        }
        if let gate { flush(gate) }
        giveBack(ahead, queue: queue)
        locked(notify: true) { $0.fetcherDone = true }
        wakeCommitters()
    }

    /// Puts the processing list right: a job in it that this process does not hold is settled
    /// again when the process settled it lately (the server that took that settle lost it in a
    /// failover: its result is committed, so it is acknowledged and its pending key removed, not
    /// validated twice), and otherwise given back to its queue (a reserve whose reply was lost).
    func reconcile(_ queue: any JobQueue) throws {
        // In flight read first: a job a committer settles meanwhile is still kept.
        let inFlight = locked { Array($0.inFlight.values.map(\.raw)) }
        let done = try queue.reconcile(keeping: inFlight) { self.settledJobs.settlement(of: $0, now: self.now()) }
        if done.requeued > 0 { logger.info("Gave back jobs a lost reply left in processing", metadata: ["jobs.count": "\(done.requeued)"]) }
        if done.resettled > 0 {
            logger.warning(
                "Settled again jobs whose settle a failover lost (their results were already stored)",
                metadata: ["jobs.count": "\(done.resettled)"])
        }
    }

    private func flush(_ gate: CircuitGate) {
        do {
            for transition in try gate.flush(now: now()) {
                logger.warning("Apple outage circuit changed", metadata: ["circuit.transition": "\(transition)"])
            }
        } catch {
            logger.debug("Outage circuit unreachable", error: error)
        }
    }

    private func flush(_ lifecycle: VerifyReceiptGate) {
        do {
            let before = lifecycle.lifecycle
            guard try lifecycle.flush(now: now()) else { return }
            let after = lifecycle.lifecycle
            metrics.verifyReceipt(after)
            if before.goneSince == nil, after.goneSince != nil {
                logger.critical(
                    "verifyReceipt is gone (HTTP 404/410 on a run of calls): apps on `auto` with an In-App Purchase key move to the App Store Server API; the others keep retrying until they get a key"
                )
            } else if before.sunset != after.sunset || before.deprecation != after.deprecation {
                logger.warning(
                    "verifyReceipt announces its end",
                    metadata: [
                        "verify_receipt.deprecation": "\(after.deprecation.map { "\($0)" } ?? "-")",
                        "verify_receipt.sunset": "\(after.sunset.map { "\($0)" } ?? "-")",
                    ])
            }
        } catch {
            logger.debug("verifyReceipt lifecycle unreachable", error: error)
        }
    }

    /// Waits (briefly) until a call slot is free and there is a job to start or room to reserve
    /// one; returns the free call slots and how many more jobs may be reserved.
    private func waitForWork(ahead: Int) -> (calls: Int, room: Int) {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(0.1)
        while !shared.stopping {
            let (calls, room) = capacity(shared)
            if calls > 0, ahead > 0 || room > 0 { break }
            if !condition.wait(until: deadline) { break }
        }
        return shared.stopping ? (0, 0) : capacity(shared)
    }

    /// Call slots free (fewer than `concurrency` calling), and room to reserve (fewer than twice
    /// that in hand: calling, reserved ahead, or answered and waiting for a commit).
    private func capacity(_ shared: Shared) -> (calls: Int, room: Int) {
        (max(0, configuration.concurrency - shared.calling.count), max(0, 2 * configuration.concurrency - shared.inFlight.count))
    }

    /// Puts reserved jobs in flight (they are in the processing list now); returns their tokens.
    private func register(_ jobs: [ReservedJob]) -> [Int] {
        locked { shared in
            jobs.map { job in
                shared.nextToken += 1
                shared.inFlight[shared.nextToken] = job
                return shared.nextToken
            }
        }
    }

    /// Shutdown: the jobs reserved ahead were never started; they go back to the queue now rather
    /// than wait for the janitor. If Redis cannot take them, they stay in the processing list,
    /// where the janitor finds them once this process's heartbeat lapses.
    private func giveBack(_ ahead: [(token: Int, job: ReservedJob)], queue: (any JobQueue)?) {
        guard !ahead.isEmpty else { return }
        let keep = locked { shared in
            for item in ahead { shared.inFlight[item.token] = nil }
            return Array(shared.inFlight.values.map(\.raw))
        }
        do {
            let moved = try queue?.requeueStrays(keeping: keep) ?? 0
            logger.info("Gave back the jobs reserved ahead", metadata: ["jobs.count": "\(moved)"])
        } catch {
            logger.warning("Could not give back the jobs reserved ahead; the janitor will", error: error)
        }
    }

    /// Starts `items`, reading the history cursors the Server API purchases among them need in one
    /// round trip to Postgres, not one per job.
    private func start(
        _ items: [(token: Int, job: ReservedJob)], store: (any WorkerStore)?, gate: CircuitGate, lifecycle: VerifyReceiptGate,
        budget: ImportBudgetGate, using generator: inout SystemRandomNumberGenerator
    ) {
        guard !items.isEmpty else { return }
        let cursors = Result { try historyCursors(of: items.map(\.job), store: store) }
        for item in items {
            start(item.token, item.job, store: store, cursors: cursors, gate: gate, lifecycle: lifecycle, budget: budget, using: &generator)
        }
    }

    /// The history cursors of `jobs`' customers (a purchase whose customer's history the call
    /// budget reads), read at once.
    private func historyCursors(of jobs: [ReservedJob], store: (any WorkerStore)?) throws -> [HistoryKey: HistoryCursor] {
        var keys: Set<HistoryKey> = []
        for job in jobs {
            guard let envelope = job.envelope, let validation = Self.purchaseValidation(of: envelope.payload) else { continue }
            if case .purchase(let purchase) = validation, purchase.fraudReason != nil { continue }
            guard let store else { throw StoreFailure(code: .unavailable, message: "no connection") }
            if let app = try store.app(id: envelope.appID), let key = planner.historyKey(envelope, validation, app: app) {
                keys.insert(HistoryKey(appID: app.id, originalTransactionID: key))
            }
        }
        guard let store, !keys.isEmpty else { return [:] }
        return try store.historyCursors(keys)
    }

    /// The purchase a job asks Apple to validate (the only jobs that may read a history); nil for
    /// the others.
    private static func purchaseValidation(of payload: JobPayload) -> ValidationJob? {
        switch payload {
        case .notification, .delivery, .consumption, .repoll: nil
        case .receipt(let receipt): .purchase(.receipt(receipt))
        case .transaction(let transaction): .purchase(.transaction(transaction))
        case .importItem(let item): .purchase(item.purchase)
        }
    }

    private func start(
        _ token: Int, _ job: ReservedJob, store: (any WorkerStore)?, cursors: Result<[HistoryKey: HistoryCursor], any Error>,
        gate: CircuitGate, lifecycle: VerifyReceiptGate, budget: ImportBudgetGate, using generator: inout SystemRandomNumberGenerator
    ) {
        locked { shared in
            shared.calling[token] = DispatchTime.now().uptimeNanoseconds
        }
        guard let envelope = job.envelope else {
            logger.warning("Undecodable job buried")
            return decide(token, job, .bury(nil))
        }
        let validation: ValidationJob
        switch envelope.payload {
        case .notification(let notification):
            // Apple's own statement, checked at the door: nothing to ask Apple, so neither the
            // circuit nor the app's backend applies.
            return decide(token, job, planner.notification(envelope, notification, using: &generator))
        case .delivery(let delivery):
            // A call to the customer's backend, not Apple: Apple's circuit does not apply.
            return startDelivery(token, job, envelope, delivery, store: store, using: &generator)
        case .consumption(let consumption):
            // A Server API call of its own with a deadline: retried by its own rule, not deferred
            // by the validations' circuit.
            return startConsumption(token, job, envelope, consumption, store: store, using: &generator)
        case .repoll(let repoll): validation = .repoll(repoll)
        case .receipt(let receipt): validation = .purchase(.receipt(receipt))
        case .transaction(let transaction): validation = .purchase(.transaction(transaction))
        case .importItem(let item): validation = .purchase(item.purchase)
        }
        // A purchase the ingestion node found forged is recorded, never sent to Apple: no circuit,
        // no secret, no app lookup beyond the one the store's foreign key makes.
        if case .purchase(let purchase) = validation, purchase.fraudReason != nil { return decide(token, job, planner.fraud(envelope)) }
        let permission = gate.permission(now: now())
        if case .deny(let until) = permission {
            return decide(token, job, planner.deferred(envelope, until: until, using: &generator))
        }
        let app: AppRecord?
        var cursor: HistoryCursor?
        do {
            guard let store else { throw StoreFailure(code: .unavailable, message: "no connection") }
            app = try store.app(id: envelope.appID)
            // The call budget: a customer whose history was read costs one call, not the history.
            if let app, let key = planner.historyKey(envelope, validation, app: app) {
                cursor = try cursors.get()[HistoryKey(appID: app.id, originalTransactionID: key)]
            }
        } catch {
            return decide(token, job, planner.storeUnavailable(envelope, calls: [], using: &generator))
        }
        guard let app else { return decide(token, job, planner.unknownApp(envelope)) }
        let isProbe = permission == .probe
        guard let (request, switchesApp) = request(token, job, envelope, validation, app: app, lifecycle: lifecycle, cursor: cursor) else {
            return
        }
        let canMove = app.backend == .auto && app.serverAPIKey != nil
        let call: @Sendable () -> Void = {
            self.call(
                token, job, envelope, request, switchesApp: switchesApp, app: app, canMove: canMove, gate: gate, lifecycle: lifecycle,
                isProbe: isProbe)
        }
        // A bulk import's call spends its app's import budget, apart from live traffic's; except the
        // circuit's probe, whose verdict every worker waits for (one call, whatever the budget).
        guard envelope.importID != nil, !isProbe else { return call() }
        spendImportBudget(token, job, envelope, app: app, budget: budget, call: call, using: &generator)
    }

    /// The call the planner makes of a started job (and whether it records the app's switch),
    /// raising the app's alarms once; nil when the planner settled the job instead (decided here).
    private func request(
        _ token: Int, _ job: ReservedJob, _ envelope: JobEnvelope, _ validation: ValidationJob, app: AppRecord, lifecycle: VerifyReceiptGate,
        cursor: HistoryCursor?
    ) -> (ValidationRequest, switchesApp: Bool)? {
        let request: ValidationRequest
        let switchesApp: Bool
        switch planner.start(envelope, validation, app: app, verifyReceipt: lifecycle.lifecycle, historyCursor: cursor) {
        case .call(let call, let switches): (request, switchesApp) = (call, switches)
        case .settle(let plan):
            if case .bury(let failed?) = plan, let code = failed.errorCode, ConfigurationAlarm.raiseOnce(appID: app.id) {
                logger.error(
                    "The app cannot use the App Store Server API: \(failed.errorMessage ?? code.rawValue)",
                    metadata: ["app.id": "\(app.id.uuidString.lowercased())", "error.code": "\(code)"])
            }
            decide(token, job, plan)
            return nil
        }
        if switchesApp, SwitchAlarm.raiseOnce(appID: app.id) {
            metrics.backendSwitched()
            logger.critical(
                "verifyReceipt is retired: this app now validates with the App Store Server API",
                metadata: ["app.id": "\(app.id.uuidString.lowercased())", "app.bundle_id": "\(app.bundleID)"])
        }
        return (request, switchesApp)
    }

    /// Runs a bulk import's `call` within its app's import budget: now, in the slot booked for it,
    /// or (budget spent) not at all, the job deferred to the retry set.
    private func spendImportBudget(
        _ token: Int, _ job: ReservedJob, _ envelope: JobEnvelope, app: AppRecord, budget: ImportBudgetGate,
        call: @escaping @Sendable () -> Void, using generator: inout SystemRandomNumberGenerator
    ) {
        switch budget.slot(app: app.bundleID, now: now()) {
        case .now:
            call()
        case .booked(let at):
            // The token is this call's: it waits in its slot (at most the booking window).
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, at.timeIntervalSince(now())), execute: call)
        case .later(let until):
            // Spent for the next seconds: this job waits in the retry set (without an attempt), and
            // the gate holds back other import jobs until then.
            metrics.importDeferred()
            decide(token, job, planner.rateLimited(envelope, until: until, using: &generator))
        }
    }

    /// The call to Apple of a started job, and the plan its answer makes.
    private func call(
        _ token: Int, _ job: ReservedJob, _ envelope: JobEnvelope, _ request: ValidationRequest, switchesApp: Bool, app: AppRecord,
        canMove: Bool, gate: CircuitGate, lifecycle: VerifyReceiptGate, isProbe: Bool
    ) {
        let sandboxPolicy = app.sandboxPolicy
        verifier.verify(request) { outcome in
            // On the HTTP engine's thread: count, decide, hand over; nothing here blocks.
            // One circuit for both APIs: an outage of either defers the jobs, a 429 is not an outage.
            gate.record(outage: outcome.verdict == .outage, probe: isProbe)
            self.metrics.record(outcome.calls)
            var rng = SystemRandomNumberGenerator()
            lifecycle.record(outcome)
            var plan: JobPlan
            if outcome.notice?.gone == true, canMove {
                // verifyReceipt answers "gone" and this app can move: wait (without an attempt) for
                // the deployment to agree, then it goes to the Server API.
                plan = self.planner.deferred(envelope, until: self.now().addingTimeInterval(2), using: &rng)
            } else {
                plan = self.planner.plan(envelope, outcome: outcome, sandboxPolicy: sandboxPolicy, using: &rng)
            }
            if switchesApp, case .store(var record) = plan {
                record.switchesApp = true
                plan = .store(record)
            }
            if case .bury(let failed?) = plan, failed.errorCode == .sharedSecretMismatch, ConfigurationAlarm.raiseOnce(appID: app.id) {
                // Every receipt of this app will fail the same way until someone fixes the secret:
                // say it once, loudly, not once per job.
                self.logger.error(
                    "Apple rejects this app's shared secret (21004): update it, then retry the dead letters",
                    metadata: ["app.id": "\(app.id.uuidString.lowercased())", "app.bundle_id": "\(app.bundleID)"])
            }
            self.decide(token, job, plan)
        }
    }

    private func startDelivery(
        _ token: Int, _ job: ReservedJob, _ envelope: JobEnvelope, _ delivery: WebhookDelivery, store: (any WorkerStore)?,
        using generator: inout SystemRandomNumberGenerator
    ) {
        let endpoint: WebhookEndpointRecord?
        do {
            guard let store else { throw StoreFailure(code: .unavailable, message: "no connection") }
            endpoint = try store.webhookEndpoint(id: delivery.target.endpointID)
        } catch {
            return decide(token, job, planner.storeUnavailable(envelope, calls: [], using: &generator))
        }
        switch planner.webhookStart(envelope, delivery, endpoint: endpoint) {
        case .settle(let plan): return decide(token, job, plan)
        case .send(let request):
            guard let webhooks else {
                return decide(
                    token, job,
                    .bury(envelope.failed(code: .webhooksNotConfigured, message: "this worker cannot send webhooks", calls: [], at: now())))
            }
            webhooks.deliver(request) { report in
                var rng = SystemRandomNumberGenerator()
                self.metrics.delivered(report)
                self.decide(token, job, self.planner.webhook(envelope, delivery, report: report, using: &rng))
            }
        }
    }
}
