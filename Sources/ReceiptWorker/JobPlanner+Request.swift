import Foundation
import ReceiptCore

/// How a job starts: a call to Apple, or a plan that settles it without one.
public enum JobStart: Sendable, Equatable {
    case call(VerificationRequest)
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
    public func start(_ envelope: JobEnvelope, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle = VerifyReceiptLifecycle()) -> JobStart {
        markingSwitch(route(envelope, app: app, verifyReceipt: verifyReceipt), app: app, verifyReceipt: verifyReceipt)
    }

    private func route(_ envelope: JobEnvelope, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle) -> JobStart {
        let source = envelope.source ?? .receipt
        let switches = app.backend == .auto && app.switchedToServerAPIAt == nil && app.serverAPIKey != nil && verifyReceipt.isRetired(at: now())
        let wantsServerAPI = source != .receipt || app.effectiveBackend == .serverAPI || switches
        guard wantsServerAPI else {
            return .call(
                VerificationRequest(
                    receiptData: envelope.receipt, sharedSecret: app.sharedSecret, excludeOldTransactions: app.excludeOldTransactions))
        }
        guard let key = app.serverAPIKey else {
            let code = app.serverAPIKeyID == nil ? "server_api_key_missing" : "server_api_key_unreadable"
            let message =
                app.serverAPIKeyID == nil
                ? "the app has no In-App Purchase key: add one with `receiptq apps server-api-key`, then retry"
                : "the app's In-App Purchase key cannot be opened: check RECEIPTQ_SECRETS_KEY, then retry"
            return .settle(.bury(envelope.failed(code: code, message: message, calls: [], at: now())))
        }
        let environment = envelope.environment.flatMap { AppStoreEnvironment(rawValue: $0.lowercased()) }
        if let target = envelope.subscription {
            return .call(
                serverAPIRequest(
                    envelope,
                    ServerAPIQuery(
                        operation: .statuses, transactionID: target.originalTransactionID, bundleID: envelope.bundleID ?? app.bundleID,
                        key: key, environment: environment)))
        }
        guard let transactionID = envelope.transactionID, !transactionID.isEmpty else {
            // The door sets an empty id for a signature-checked receipt with no purchase at all.
            if source == .receipt && envelope.transactionID == "" {
                // A signature-checked receipt without a single purchase: nothing for the Server API
                // to look up, and nothing to entitle. Valid as the receipt is, with no purchases.
                return .settle(
                    .store(
                        ValidationRecord(
                            envelope: envelope, status: .valid, environment: envelope.environment?.lowercased(), appleStatus: nil,
                            purchases: [], latestReceipt: nil, calls: [], validatedAt: now(), validatedBy: .serverAPI)))
            }
            return .settle(
                .bury(
                    envelope.failed(
                        code: "receipt_not_verified_locally",
                        message: "the Server API needs a transaction id from a receipt whose signature was checked: configure trust roots",
                        calls: [], at: now())))
        }
        return .call(
            serverAPIRequest(
                envelope,
                ServerAPIQuery(
                    operation: .history, transactionID: transactionID, bundleID: envelope.bundleID ?? app.bundleID, key: key,
                    environment: source == .receipt ? nil : environment)))
    }

    private func serverAPIRequest(_ envelope: JobEnvelope, _ query: ServerAPIQuery) -> VerificationRequest {
        VerificationRequest(receiptData: envelope.receipt, sharedSecret: nil, excludeOldTransactions: false, serverAPI: query)
    }

    /// Marks a request (and so its result) as one that records its app's switch.
    private func markingSwitch(_ start: JobStart, app: AppRecord, verifyReceipt: VerifyReceiptLifecycle) -> JobStart {
        guard case .call(var request) = start, request.serverAPI != nil, app.backend == .auto, app.switchedToServerAPIAt == nil,
            verifyReceipt.isRetired(at: now())
        else { return start }
        request.switchesApp = true
        return .call(request)
    }
}
