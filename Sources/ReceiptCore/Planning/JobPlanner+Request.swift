import Foundation

/// What a job asks Apple about: a purchase (a receipt or a transaction, posted or imported), or a
/// subscription to poll again.
public enum ValidationJob: Sendable, Equatable {
    case purchase(PurchaseJob)
    case repoll(RepollJob)

    /// What `payload` asks Apple about; nil for a notification or a webhook delivery, which ask
    /// Apple nothing.
    public init?(_ payload: JobPayload) {
        switch payload {
        case .receipt(let job): self = .purchase(.receipt(job))
        case .transaction(let job): self = .purchase(.transaction(job))
        case .importItem(let item): self = .purchase(item.purchase)
        case .repoll(let job): self = .repoll(job)
        case .notification, .delivery, .consumption: return nil
        }
    }

    /// What Apple is sent or asked by: a receipt (a re-poll's is its latest receipt), a signed
    /// transaction, or a bare id.
    var source: JobSource {
        switch self {
        case .purchase(let job): job.source
        case .repoll(let job): job.source
        }
    }

    /// The receipt `verifyReceipt` is sent (or the signed transaction, which only the Server API reads).
    var receiptData: String {
        switch self {
        case .purchase(let job): job.receiptData
        case .repoll(let job): job.latestReceipt
        }
    }

    var bundleID: String? {
        switch self {
        case .purchase(let job): job.bundleID
        case .repoll(let job): job.bundleID
        }
    }

    var environment: String? {
        switch self {
        case .purchase(let job): job.environment
        case .repoll(let job): job.environment
        }
    }
}

/// How a job starts: a call to Apple, or a plan that settles it without one.
public enum JobStart: Sendable, Equatable {
    /// Ask Apple. `switchesApp`: this is the first Server API call of an `auto` app whose
    /// `verifyReceipt` is retired, so storing its result also records the app's switch.
    case call(ValidationRequest, switchesApp: Bool)
    case settle(JobPlan)
}

extension JobPlanner {
    /// Which Apple API a job asks, and what: one rule for every job, whichever door it came in by.
    ///
    /// - A StoreKit 2 job (a signed transaction or a transaction id) can only be answered by the
    ///   Server API: without a usable key it goes to the dead letters with the reason.
    /// - A receipt of an app whose backend is (or `auto` switched to) the Server API asks for the
    ///   transaction id its signature-checked receipt gave at the door, then the history; a receipt
    ///   that was not checked at the door has no trustworthy id and is refused the same way.
    /// - A re-poll of such an app asks for the subscription's statuses.
    /// - Everything else goes to `verifyReceipt`, as before.
    /// - Parameter verifyReceipt: the deployment's view of `verifyReceipt`: once it is retired (gone,
    ///   or past its sunset), `auto` apps with a key move to the Server API.
    /// - Parameter historyCursor: where the customer's history was last read up to (see
    ///   ``historyKey(_:_:app:)``); nil: never, a first sight.
    public func start(
        _ envelope: JobEnvelope, _ validation: ValidationJob, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle = VerifyReceiptLifecycle(),
        historyCursor: HistoryCursor? = nil
    ) -> JobStart {
        markingSwitch(
            route(envelope, validation, app: app, verifyReceipt: verifyReceipt, historyCursor: historyCursor), app: app,
            verifyReceipt: verifyReceipt)
    }

    private func route(
        _ envelope: JobEnvelope, _ validation: ValidationJob, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle, historyCursor: HistoryCursor?
    ) -> JobStart {
        let source = validation.source
        let switches = app.backend == .auto && app.switchedToServerAPIAt == nil && app.serverAPIKey != nil && verifyReceipt.isRetired(at: now())
        let wantsServerAPI = source != .receipt || app.effectiveBackend == .serverAPI || switches
        guard wantsServerAPI else {
            return .call(
                .verifyReceipt(
                    receiptData: validation.receiptData, sharedSecret: app.sharedSecret, excludeOldTransactions: app.excludeOldTransactions),
                switchesApp: false)
        }
        guard let key = app.serverAPIKey else {
            let code: FailureCode = app.serverAPIKeyID == nil ? .serverAPIKeyMissing : .serverAPIKeyUnreadable
            let message =
                app.serverAPIKeyID == nil
                ? "the app has no In-App Purchase key: add one with `receiptq apps server-api-key`, then retry"
                : "the app's In-App Purchase key cannot be opened: check RECEIPTQ_SECRETS_KEY, then retry"
            return .settle(.bury(envelope.failed(code: code, message: message, calls: [], at: now())))
        }
        let bundleID = validation.bundleID ?? app.bundleID
        let environment = validation.environment.flatMap { AppStoreEnvironment(rawValue: $0.lowercased()) }
        let purchase: PurchaseJob
        switch validation {
        case .repoll(let job):
            return .call(
                .serverAPI(
                    ServerAPIQuery(
                        operation: .statuses, transactionID: job.target.originalTransactionID, bundleID: bundleID, key: key,
                        environment: environment, purpose: .repoll)),
                switchesApp: false)
        case .purchase(let job):
            purchase = job
        }
        guard let transactionID = purchase.transactionID, !transactionID.isEmpty else {
            // The door sets an empty id for a signature-checked receipt with no purchase at all.
            if source == .receipt && purchase.transactionID == "" {
                // A signature-checked receipt without a single purchase: nothing for the Server API
                // to look up, and nothing to entitle. Valid as the receipt is, with no purchases.
                return .settle(
                    .store(
                        ValidationRecord(
                            envelope: envelope, status: .valid, environment: purchase.environment?.lowercased(), appleStatus: nil,
                            purchases: [], latestReceipt: nil, calls: [], validatedAt: now(), validatedBy: .serverAPI)))
            }
            return .settle(
                .bury(
                    envelope.failed(
                        code: .receiptNotVerifiedLocally,
                        message: "the Server API needs a transaction id from a receipt whose signature was checked: configure trust roots",
                        calls: [], at: now())))
        }
        let budget = CallBudget(envelope, purchase, app: app)
        if let payload = budget.trustedPayload {
            if app.effectiveJWSTrust == .local, let signed = payload.signedDate, app.jwsTrust.isFresh(signedDate: signed, at: now()) {
                return .settle(storedLocally(envelope, payload: payload.json, app: app))
            }
            if historyCursor != nil {
                // A customer already seen: one call. A subscription's statuses hold its latest
                // transaction and renewal info; anything else is Get Transaction Info.
                let operation: ServerAPIQuery.Operation = payload.type == "Auto-Renewable Subscription" ? .statuses : .transactionInfo
                return .call(
                    .serverAPI(
                        ServerAPIQuery(
                            operation: operation, transactionID: transactionID, bundleID: bundleID, key: key, environment: environment,
                            purpose: purpose(of: envelope, resync: false))),
                    switchesApp: false)
            }
        } else if budget.isBareID, historyCursor != nil {
            return .call(
                .serverAPI(
                    ServerAPIQuery(
                        operation: .transactionInfo, transactionID: transactionID, bundleID: bundleID, key: key, environment: environment,
                        purpose: purpose(of: envelope, resync: false))
                ),
                switchesApp: false)
        }
        // A first sight, an import, a receipt or an operator's resync: the history, from the
        // stored revision on (only new transactions), or from its start for a resync.
        return .call(
            .serverAPI(
                ServerAPIQuery(
                    operation: .history, transactionID: transactionID, bundleID: bundleID, key: key,
                    environment: source == .receipt ? nil : environment, historyCursor: budget.isResync ? nil : historyCursor,
                    historyKey: budget.isResync ? transactionID : historyKey(envelope, validation, app: app),
                    purpose: purpose(of: envelope, resync: budget.isResync))),
            switchesApp: false)
    }

    /// What a purchase's calls are spent on: an operator's resync is support; an import's calls
    /// wait for the hour when the budget runs short; everything else a device or backend posted is
    /// a validation someone waits for.
    private func purpose(of envelope: JobEnvelope, resync: Bool) -> ApplePurpose {
        if resync { return .support }
        if case .importItem = envelope.payload { return .import }
        return .validation
    }

    /// Which customer's history cursor ``start(_:_:app:verifyReceipt:historyCursor:)`` needs for a
    /// job: the original transaction id (the door-verified JWS's, or the id itself for a bare id, a
    /// receipt or an import); nil when none is needed (a re-poll, a resync, a purchase stored
    /// without a call) so the worker spares the database the look-up.
    public func historyKey(_ envelope: JobEnvelope, _ validation: ValidationJob, app: AppRecord) -> String? {
        guard case .purchase(let purchase) = validation, let transactionID = purchase.transactionID, !transactionID.isEmpty,
            validation.source != .receipt || app.effectiveBackend == .serverAPI
        else { return nil }
        let budget = CallBudget(envelope, purchase, app: app)
        if budget.isResync { return nil }
        guard let payload = budget.trustedPayload else { return transactionID }
        if app.effectiveJWSTrust == .local, let signed = payload.signedDate, app.jwsTrust.isFresh(signedDate: signed, at: now()) { return nil }
        return payload.originalTransactionID.isEmpty ? transactionID : payload.originalTransactionID
    }

    /// A door-verified, fresh transaction of a `local` app, stored as the door read it: no call,
    /// the same rules as Apple's answer (sandbox policy, re-poll schedule), validated by `local_jws`.
    private func storedLocally(_ envelope: JobEnvelope, payload: JSONValue, app: AppRecord) -> JobPlan {
        let environment = payload["environment"]?.stringValue?.lowercased() ?? AppStoreEnvironment.production.rawValue
        let ledger = ServerAPILedger.build(environment: environment, transactions: [payload], statuses: [], at: now())
        var generator = SystemRandomNumberGenerator()
        return plan(
            envelope,
            outcome: ValidationOutcome(
                verdict: .valid, environment: ledger.environment, purchases: ledger.purchases, subscriptions: ledger.subscriptions, calls: [],
                backend: .localJWS),
            sandboxPolicy: app.sandboxPolicy, using: &generator)
    }

    /// Marks a request (and so its result) as one that records its app's switch.
    private func markingSwitch(_ start: JobStart, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle) -> JobStart {
        guard case .call(let request, _) = start, request.serverAPI != nil, app.backend == .auto, app.switchedToServerAPIAt == nil,
            verifyReceipt.isRetired(at: now())
        else { return start }
        return .call(request, switchesApp: true)
    }
}

/// What a purchase job allows the call budget (issue 42, item 1), read once per decision.
private struct CallBudget {
    /// The payload of a StoreKit 2 transaction the door verified (Apple's signature and chain, the
    /// app's bundle): trusted as read, so it is decoded here without checking the signature again.
    /// Nil for anything else, and for an import or a resync, which read the history whatever the
    /// device sent.
    var trustedPayload: JWSTransactionPayload?
    /// A bare transaction id (nothing signed to read).
    var isBareID = false
    /// An operator's resync: the history from its start.
    var isResync: Bool

    init(_ envelope: JobEnvelope, _ purchase: PurchaseJob, app: AppRecord) {
        isResync = envelope.origin == .resync
        guard case .transaction(let job) = purchase, envelope.importID == nil, !isResync else { return }
        guard let jws = job.signedTransaction else {
            isBareID = true
            return
        }
        // The door sets the transaction id only for a JWS it verified as this app's.
        guard job.fraudReason == nil, job.transactionID != nil, let parsed = try? CompactJWS(jws),
            let json = try? JSONValue.parse(parsed.payload), let payload = try? JWSTransactionPayload(json: json)
        else { return }
        trustedPayload = payload
    }
}
