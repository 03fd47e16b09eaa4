import Dispatch
import Foundation
import ReceiptCore
import Synchronization

/// One validation on the Server API: the calls, environment switches and pages of one job's
/// attempt, ending in exactly one report. Each step runs after the previous one's answer, so the
/// state is never touched by two threads at once; the lock only makes that provable to Swift.
final class ServerAPIAttempt: Sendable {
    private struct State {
        var environment: AppStoreEnvironment
        var switched: Set<AppStoreEnvironment> = []
        var calls: [AppleCall] = []
        var signedTransactions: [String] = []
        var pages = 0
        /// The revision of the last history page read (where the next read starts).
        var revision: String?
        /// The earliest `signedDate` of the answers' JWS: when Apple read what they say.
        var signedAt: Date?
    }

    private let client: ServerAPIClient
    private let query: ServerAPIQuery
    private let completion: @Sendable (ValidationOutcome) -> Void
    private let state: Mutex<State>

    init(client: ServerAPIClient, query: ServerAPIQuery, completion: @escaping @Sendable (ValidationOutcome) -> Void) {
        self.client = client
        self.query = query
        self.completion = completion
        self.state = Mutex(State(environment: query.environment ?? .production))
    }

    func start() {
        // Apple's ids are decimal; anything else would be spliced into a URL path.
        guard !query.transactionID.isEmpty, query.transactionID.count <= 64, query.transactionID.utf8.allSatisfy({ (48...57).contains($0) })
        else { return finish(.invalid, code: .invalidTransactionID) }
        switch query.operation {
        case .history: historyPage(revision: startRevision())
        case .statuses: statuses(transactions: [])
        case .transactionInfo: transactionInfo()
        }
    }

    /// The stored revision to read on from, when the attempt asks the environment it belongs to
    /// (Apple's revisions mean nothing in the other one).
    private func startRevision() -> String? {
        guard let cursor = query.historyCursor else { return nil }
        return state.withLock { $0.environment } == cursor.environment ? cursor.revision : nil
    }

    // MARK: Steps

    private func historyPage(revision: String?) {
        var path = "/inApps/v2/history/\(query.transactionID)?sort=ASCENDING"
        if let revision, let encoded = revision.addingPercentEncoding(withAllowedCharacters: .alphanumerics) {
            path += "&revision=\(encoded)"
        }
        call(path, endpoint: .transactionHistory) { json in
            let page = json["signedTransactions"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let pages = self.state.withLock { state in
                state.signedTransactions += page
                state.pages += 1
                if let revision = json["revision"]?.stringValue, !revision.isEmpty { state.revision = revision }
                return state.pages
            }
            if json["hasMore"]?.boolValue == true, let next = json["revision"]?.stringValue, !next.isEmpty {
                guard pages < self.client.configuration.maxHistoryPages else {
                    return self.finish(.transient, code: .historyTooLong)
                }
                return self.historyPage(revision: next)
            }
            self.decodeOffEngine {
                let signed = self.state.withLock { $0.signedTransactions }
                var transactions: [JSONValue] = []
                for jws in signed {
                    guard let payload = self.payload(jws, as: .transaction) else { return }
                    transactions.append(payload)
                }
                let hasSubscriptions = transactions.contains(where: Self.isSubscription)
                if hasSubscriptions { self.statuses(transactions: transactions) } else { self.finishValid(transactions: transactions, statuses: []) }
            }
        }
    }

    private static func isSubscription(_ transaction: JSONValue) -> Bool {
        transaction["expiresDate"] != nil || transaction["type"]?.stringValue == "Auto-Renewable Subscription"
    }

    /// Get Transaction Info: the one call for a purchase of a customer already seen; the statuses
    /// follow only when it is an auto-renewable subscription (whose state they hold).
    private func transactionInfo() {
        call("/inApps/v1/transactions/\(query.transactionID)", endpoint: .transactionInfo) { json in
            self.decodeOffEngine {
                guard let signed = json["signedTransactionInfo"]?.stringValue else {
                    return self.finish(.outage, code: .nonJSONBody)
                }
                guard let transaction = self.payload(signed, as: .transaction) else { return }
                if Self.isSubscription(transaction) {
                    self.statuses(transactions: [transaction])
                } else {
                    self.finishValid(transactions: [transaction], statuses: [])
                }
            }
        }
    }

    private func statuses(transactions: [JSONValue]) {
        call("/inApps/v1/subscriptions/\(query.transactionID)", endpoint: .subscriptionStatuses) { json in
            self.decodeOffEngine {
                var items: [ServerAPIStatusItem] = []
                for group in json["data"]?.arrayValue ?? [] {
                    for last in group["lastTransactions"]?.arrayValue ?? [] {
                        guard let signed = last["signedTransactionInfo"]?.stringValue, let transaction = self.payload(signed, as: .transaction) else {
                            if last["signedTransactionInfo"]?.stringValue == nil { continue }
                            return
                        }
                        var renewal: JSONValue?
                        if let signedRenewal = last["signedRenewalInfo"]?.stringValue {
                            guard let decoded = self.payload(signedRenewal, as: .renewalInfo) else { return }
                            renewal = decoded
                        }
                        items.append(
                            ServerAPIStatusItem(
                                status: last["status"]?.intValue ?? 0,
                                originalTransactionID: last["originalTransactionId"]?.stringValue
                                    ?? transaction["originalTransactionId"]?.stringValue ?? "",
                                transaction: transaction, renewal: renewal))
                    }
                }
                self.finishValid(transactions: transactions, statuses: items)
            }
        }
    }

    /// The furthest ahead the attempt books a slot in the shared bucket and waits for it
    /// in-process; beyond it the attempt ends and the job waits in the retry set instead (holding
    /// no worker slot).
    static let maximumInlineWait: TimeInterval = 2

    /// One call, once the shared bucket allows it; an answer goes to `then`, everything else ends
    /// the attempt or switches environment.
    private func call(_ path: String, endpoint: ServerAPIEndpoint, then: @escaping @Sendable (JSONValue) -> Void) {
        let environment = state.withLock { $0.environment }
        guard let throttle = client.throttle else { return send(path, endpoint: endpoint, environment: environment, then: then) }
        let now = client.now()
        throttle.reserve(
            app: query.bundleID, endpoint: endpoint, environment: environment, purpose: query.purpose, now: now,
            bookingAhead: Self.maximumInlineWait
        ) { slot in
            switch slot {
            case .now:
                self.send(path, endpoint: endpoint, environment: environment, then: then)
            case .booked(let at):
                // The slot is this call's: go at its time without asking again.
                DispatchQueue.global().asyncAfter(deadline: .now() + max(0, at.timeIntervalSince(now))) {
                    self.send(path, endpoint: endpoint, environment: environment, then: then)
                }
            case .later(let until):
                self.finish(.transient, code: .rateLimited, rateLimitedUntil: until)
            }
        }
    }

    private func send(
        _ path: String, endpoint: ServerAPIEndpoint, environment: AppStoreEnvironment, then: @escaping @Sendable (JSONValue) -> Void
    ) {
        client.get(path, endpoint: endpoint, environment: environment, query: query) { outcome, call in
            self.state.withLock { $0.calls.append(call) }
            switch outcome {
            case .answered(let json):
                then(json)
            case .notInThisEnvironment:
                guard self.switchEnvironment(from: environment) else { return self.finish(.invalid, code: .apple(4_040_010)) }
                self.start()
            case .unauthorized:
                // Production refuses the key of an app that has no live release yet: the sandbox
                // accepts it. Refused in both, the key is wrong.
                guard environment == .production, self.switchEnvironment(from: environment) else {
                    return self.finish(.configurationError, code: .serverAPIUnauthorized)
                }
                self.start()
            case .rateLimited(let until):
                // Apple's limit is the app's, not this job's: every worker of the app waits.
                self.client.throttle?.pause(app: self.query.bundleID, environment: environment, until: until, now: self.client.now())
                self.finish(.transient, code: .rateLimited, rateLimitedUntil: until)
            case .failed(let verdict, let code):
                self.finish(verdict, code: code)
            }
        }
    }

    /// Moves to the other environment, starting the query over: once per attempt, since an id
    /// neither environment knows must not bounce between them.
    private func switchEnvironment(from environment: AppStoreEnvironment) -> Bool {
        let target: AppStoreEnvironment = environment == .production ? .sandbox : .production
        return state.withLock { state in
            guard state.switched.isEmpty else { return false }
            state.switched.insert(target)
            state.environment = target
            state.signedTransactions = []
            state.pages = 0
            state.revision = nil
            state.signedAt = nil
            return true
        }
    }

    // MARK: Decoding

    private func decodeOffEngine(_ body: @escaping @Sendable () -> Void) {
        DispatchQueue.global().async(execute: body)
    }

    /// The payload of a JWS from Apple's answer, checked (signature, bundle, and the documented
    /// fields of `kind` with their types); nil after ending the attempt when it fails.
    private func payload(_ jws: String, as kind: JWSPayloadKind) -> JSONValue? {
        switch client.verifyPayload(jws) {
        case .success(let payload):
            do throws(JWSFailure) {
                if kind == .renewalInfo { _ = try JWSRenewalInfoPayload(json: payload) } else { _ = try JWSTransactionPayload(json: payload) }
            } catch {
                finish(.configurationError, code: .responseRejected(error))
                return nil
            }
            if let bundleID = payload["bundleId"]?.stringValue, bundleID != query.bundleID {
                finish(.configurationError, code: .responseRejected(.bundleIDMismatch))
                return nil
            }
            if let signed = JWSSigningDate(of: payload)?.date {
                state.withLock { $0.signedAt = min($0.signedAt ?? signed, signed) }
            }
            return payload
        case .failure(let rejection):
            // Apple's answer came over verified TLS: a signature that does not check means the trust
            // roots are misconfigured (or worse). Either way an operator must look, not a retry.
            finish(.configurationError, code: .responseRejected(rejection))
            return nil
        }
    }

    // MARK: Endings

    /// The states built are dated by when Apple read them (the answers' earliest `signedDate`), not
    /// by when the answer was decoded: a notification Apple signed in between (a renewal at the
    /// instant the poll read the period's end) is the newer observation and must win the
    /// subscription row (`observed_at`), as notifications are dated by their `signedDate` too. The
    /// client's clock dates an answer without a signed date.
    private func finishValid(transactions: [JSONValue], statuses: [ServerAPIStatusItem]) {
        let (environment, calls, revision, signedAt) = state.withLock { ($0.environment, $0.calls, $0.revision, $0.signedAt) }
        let ledger = ServerAPILedger.build(
            environment: environment.rawValue, transactions: transactions, statuses: statuses, at: signedAt ?? client.observedAt())
        completion(ValidationOutcome(ledger: ledger, calls: calls, historyCursor: cursor(revision: revision, environment: environment)))
    }

    /// Where this attempt's history read ended, for the next one, filed under the customer the
    /// planner names.
    private func cursor(revision: String?, environment: AppStoreEnvironment) -> HistoryCursor? {
        guard query.operation == .history, let revision, let key = query.historyKey else { return nil }
        return HistoryCursor(originalTransactionID: key, environment: environment, revision: revision)
    }

    private func finish(_ verdict: AppleVerdict, code: FailureCode, rateLimitedUntil: Date? = nil) {
        let calls = state.withLock { $0.calls }
        completion(
            ValidationOutcome(verdict: verdict, calls: calls, failure: code, rateLimitedUntil: rateLimitedUntil, backend: .serverAPI))
    }
}
