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
        case .notification, .delivery: return nil
        }
    }

    /// What Apple is sent or asked by: a receipt (a re-poll's is its latest receipt), a signed
    /// transaction, or a bare id.
    var source: JobSource {
        switch self {
        case .purchase(let job): job.source
        case .repoll: .receipt
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
    public func start(
        _ envelope: JobEnvelope, _ validation: ValidationJob, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle = VerifyReceiptLifecycle()
    ) -> JobStart {
        markingSwitch(route(envelope, validation, app: app, verifyReceipt: verifyReceipt), app: app, verifyReceipt: verifyReceipt)
    }

    private func route(_ envelope: JobEnvelope, _ validation: ValidationJob, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle) -> JobStart {
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
        return .call(
            .serverAPI(
                ServerAPIQuery(
                    operation: .history, transactionID: transactionID, bundleID: bundleID, key: key,
                    environment: source == .receipt ? nil : environment, purpose: purpose(of: envelope))),
            switchesApp: false)
    }

    /// What a purchase's calls are spent on: an import's wait for the hour when the budget runs
    /// short; everything else a device or backend posted is a validation someone waits for.
    private func purpose(of envelope: JobEnvelope) -> ApplePurpose {
        if case .importItem = envelope.payload { return .import }
        return .validation
    }

    /// Marks a request (and so its result) as one that records its app's switch.
    private func markingSwitch(_ start: JobStart, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle) -> JobStart {
        guard case .call(let request, _) = start, request.serverAPI != nil, app.backend == .auto, app.switchedToServerAPIAt == nil,
            verifyReceipt.isRetired(at: now())
        else { return start }
        return .call(request, switchesApp: true)
    }
}
