import Curl
import DevTools
import Foundation
import ReceiptCore
import Synchronization

/// The mock's App Store Server Notifications: where each bundle id's notifications go (V2 signed
/// by the mock's chain, or V1 with the shared secret as `password`), what was sent (Get
/// Notification History serves it, delivered or not), and delivery as Apple does it — retried
/// when the endpoint does not answer 2xx — with scripted duplicates, delays and held
/// notifications released later in another order.
public final class MockNotificationCenter: Sendable {
    /// Where one bundle id's notifications go.
    public struct Target: Sendable, Codable, Equatable {
        public var url: String
        /// `v2` (default) or `v1`.
        public var version: String
        /// V1's `password`: the app's shared secret.
        public var password: String?
        /// How many times an unanswered notification is sent again (Apple: 5 for V2, 3 for V1).
        public var retries: Int
        /// Seconds before the first retry; each next one waits twice as long (Apple: an hour, then
        /// 12, 24, 48 and 72 hours; the mock compresses time).
        public var retryDelaySeconds: Double

        enum CodingKeys: String, CodingKey {
            case url, version, password, retries
            case retryDelaySeconds = "retry_delay_seconds"
        }

        public init(url: String, version: String = "v2", password: String? = nil, retries: Int = 5, retryDelaySeconds: Double = 1) {
            self.url = url
            self.version = version
            self.password = password
            self.retries = retries
            self.retryDelaySeconds = retryDelaySeconds
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                url: try container.decode(String.self, forKey: .url),
                version: try container.decodeIfPresent(String.self, forKey: .version) ?? "v2",
                password: try container.decodeIfPresent(String.self, forKey: .password),
                retries: try container.decodeIfPresent(Int.self, forKey: .retries) ?? 5,
                retryDelaySeconds: try container.decodeIfPresent(Double.self, forKey: .retryDelaySeconds) ?? 1)
        }
    }

    /// How one notification is delivered.
    public struct Delivery: Sendable, Equatable {
        /// How many identical copies are posted (Apple's retries and history replays repeat them).
        public var copies: Int = 1
        /// Wait before the first post.
        public var delay: Duration = .zero
        /// Keep it until ``release(order:)``: out-of-order delivery.
        public var hold = false
        /// Never post it (Apple lost it): only Get Notification History serves it.
        public var lost = false

        public init(copies: Int = 1, delay: Duration = .zero, hold: Bool = false, lost: Bool = false) {
            self.copies = max(1, min(copies, 20))
            self.delay = delay
            self.hold = hold
            self.lost = lost
        }
    }

    /// One notification the mock sent (or holds).
    public struct Sent: Sendable {
        public var uuid: String
        public var bundleID: String
        public var environment: AppStoreEnvironment
        public var type: String
        public var subtype: String?
        public var signedDate: Date
        /// The V2 `signedPayload` (what Get Notification History returns).
        public var signedPayload: String
        /// The body posted (V2's `{"signedPayload"}` or the V1 JSON).
        var body: [UInt8]
        /// Whether the endpoint answered 2xx to one of its posts.
        public var delivered: Bool
        /// Never posted (``Delivery/lost``): the endpoint can only learn of it from the history.
        public var lost = false
        /// When, on the mock's clock, the deployment first heard of it: its first post answered
        /// 2xx, or a Get Notification History page that listed it (how late a fault made it).
        public var heard: Date?
        /// Each post: when, and Apple's `sendAttemptResult` (`SUCCESS`, `NO_RESPONSE`, `UNSUCCESSFUL_HTTP_RESPONSE_CODE`, …).
        public var attempts: [(date: Date, result: String)] = []
    }

    private struct Storage {
        var targets: [String: Target] = [:]
        var sent: [Sent] = []
        var held: [(index: Int, delivery: Delivery)] = []
        var posts = 0
    }

    private let storage = Mutex(Storage())
    private let client: HTTPClient?
    let api: MockServerAPIState

    init(api: MockServerAPIState) {
        self.api = api
        var options = CurlOptions()
        options.requestTimeout = .seconds(10)
        options.userAgent = "App Store Server Notifications (receiptq mock)"
        client = try? HTTPClient(options: options, lanes: 4)
    }

    /// Sends `bundleID`'s notifications to `target` (nil: nowhere).
    public func setTarget(_ target: Target?, bundleID: String) { storage.withLock { $0.targets[bundleID] = target } }

    /// Everything sent (or held) so far, oldest first.
    public var sent: [Sent] { storage.withLock { $0.sent } }

    /// Whether every notification sent so far, neither held nor lost, has been delivered (its
    /// endpoint answered 2xx): what a driver waits for before asking the deployment what it knows.
    /// A notification of a bundle with no target (an app with no notification URL) is never
    /// posted: nothing to wait for.
    public var allDelivered: Bool {
        storage.withLock { storage in
            let held = Set(storage.held.map(\.index))
            return storage.sent.indices.allSatisfy {
                storage.sent[$0].delivered || storage.sent[$0].lost || held.contains($0) || storage.targets[storage.sent[$0].bundleID] == nil
            }
        }
    }

    /// Notes that Get Notification History listed `uuids`: the first time counts as heard.
    func listed(_ uuids: some Sequence<String>) {
        let uuids = Set(uuids)
        let now = Date(timeIntervalSince1970: api.nowMilliseconds / 1000)
        storage.withLock { storage in
            for index in storage.sent.indices where uuids.contains(storage.sent[index].uuid) && storage.sent[index].heard == nil {
                storage.sent[index].heard = now
            }
        }
    }

    /// How many posts the mock made (copies and retries included).
    public var posts: Int { storage.withLock { $0.posts } }

    /// Signs and sends a V2 notification (or its V1 form, if the target wants V1) about
    /// `transaction`, with the subscription's `status` and `renewal` info when it is one; with an
    /// `appTransaction`, its `appData` form instead (`RESCIND_CONSENT`).
    /// - Returns: its `notificationUUID`.
    @discardableResult
    public func notify(
        type: String, subtype: String? = nil, transaction: JSONValue?, renewal: JSONValue? = nil, status: Int? = nil,
        appTransaction: JSONValue? = nil, bundleID: String, environment: AppStoreEnvironment, delivery: Delivery = Delivery()
    ) throws -> String {
        let now = api.nowMilliseconds
        let uuid = UUID().uuidString.lowercased()
        let appleEnvironment = environment == .production ? "Production" : "Sandbox"
        var data: [String: JSONValue] = ["bundleId": .string(bundleID), "bundleVersion": .string("1"), "environment": .string(appleEnvironment)]
        if let transaction { data["signedTransactionInfo"] = .string(try api.authority.sign(api.signed(transaction))) }
        if let renewal { data["signedRenewalInfo"] = .string(try api.authority.sign(renewal)) }
        if let status { data["status"] = .number(Double(status)) }
        var payload: [String: JSONValue] = [
            "notificationType": .string(type), "notificationUUID": .string(uuid), "version": .string("2.0"),
            "signedDate": .number(now), "data": .object(data),
        ]
        if let appTransaction {
            payload["data"] = nil
            payload["appData"] = .object([
                "bundleId": .string(bundleID), "environment": .string(appleEnvironment),
                "signedAppTransactionInfo": .string(try api.authority.sign(appTransaction)),
            ])
        }
        if let subtype { payload["subtype"] = .string(subtype) }
        let signedPayload = try api.authority.sign(.object(payload))
        let target = storage.withLock { $0.targets[bundleID] }
        let body: [UInt8] =
            target?.version == "v1"
            ? v1Body(
                type: type, subtype: subtype, transaction: transaction, renewal: renewal, bundleID: bundleID, environment: environment,
                password: target?.password)
            : Array(JSONValue.object(["signedPayload": .string(signedPayload)]).encodedText.utf8)
        let index = storage.withLock { storage -> Int in
            storage.sent.append(
                Sent(
                    uuid: uuid, bundleID: bundleID, environment: environment, type: type, subtype: subtype,
                    signedDate: Date(timeIntervalSince1970: now / 1000),
                    signedPayload: signedPayload, body: body, delivered: false, lost: delivery.lost))
            if delivery.hold, !delivery.lost { storage.held.append((storage.sent.count - 1, delivery)) }
            return storage.sent.count - 1
        }
        if !delivery.hold, !delivery.lost { deliver(index, delivery) }
        return uuid
    }

    /// Sends every held notification, in `order` (`reverse`, `shuffle`, or as held).
    /// - Returns: how many were released.
    @discardableResult
    public func release(order: String) -> Int {
        var held = storage.withLock { storage in
            defer { storage.held.removeAll() }
            return storage.held
        }
        switch order {
        case "reverse": held.reverse()
        case "shuffle": held.shuffle()
        default: break
        }
        // One after the other, so the order is the order of arrival.
        let items = held
        Task(executorPreference: ServerThreads.shared) {
            for item in items { await self.post(item.index, copies: item.delivery.copies) }
        }
        return items.count
    }

    private func deliver(_ index: Int, _ delivery: Delivery) {
        Task(executorPreference: ServerThreads.shared) {
            if delivery.delay > .zero { try? await Task.sleep(for: delivery.delay) }
            await self.post(index, copies: delivery.copies)
        }
    }

    /// Posts a notification `copies` times; an unanswered one is retried as the target says.
    private func post(_ index: Int, copies: Int) async {
        guard let client else { return }
        let (sent, target) = storage.withLock { ($0.sent[index], $0.targets[$0.sent[index].bundleID]) }
        guard let target else { return }
        let request = HTTPRequest(method: "POST", url: target.url, headers: [("Content-Type", "application/json")], body: sent.body)
        for _ in 0..<copies {
            var delay = target.retryDelaySeconds
            for attempt in 0...max(0, target.retries) {
                storage.withLock { $0.posts += 1 }
                let response = try? await client.send(request)
                let result =
                    switch response?.status {
                    case nil: "NO_RESPONSE"
                    case (200..<300)?: "SUCCESS"
                    default: "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
                    }
                storage.withLock { $0.sent[index].attempts.append((Date(), result)) }
                if result == "SUCCESS" {
                    let heard = Date(timeIntervalSince1970: api.nowMilliseconds / 1000)
                    storage.withLock { storage in
                        storage.sent[index].delivered = true
                        if storage.sent[index].heard == nil { storage.sent[index].heard = heard }
                    }
                    break
                }
                guard attempt < target.retries else { break }
                try? await Task.sleep(for: .milliseconds(Int(delay * 1000)))
                delay *= 2
            }
        }
    }

    /// The V1 form: the customer's whole history as `verifyReceipt` shows it in `unified_receipt`.
    private func v1Body(
        type: String, subtype: String?, transaction: JSONValue?, renewal: JSONValue?, bundleID: String, environment: AppStoreEnvironment,
        password: String?
    ) -> [UInt8] {
        let v1Type: String =
            switch (type, subtype) {
            case ("SUBSCRIBED", "RESUBSCRIBE"): "INTERACTIVE_RENEWAL"
            case ("SUBSCRIBED", _): "INITIAL_BUY"
            case ("DID_RENEW", "BILLING_RECOVERY"): "DID_RECOVER"
            case ("EXPIRED", _): "DID_CHANGE_RENEWAL_STATUS"
            default: type
            }
        let history = transaction.flatMap { $0["transactionId"]?.stringValue }.flatMap { api.history(of: $0, in: environment) } ?? []
        let latest = history.compactMap(InAppPurchase.init(serverAPITransaction:)).map(\.appleJSON)
        var pending: [JSONValue] = []
        if let renewal {
            pending.append(
                .object([
                    "original_transaction_id": renewal["originalTransactionId"] ?? .null,
                    "product_id": renewal["productId"] ?? .null, "auto_renew_product_id": renewal["autoRenewProductId"] ?? .null,
                    "auto_renew_status": .string(renewal["autoRenewStatus"]?.intValue == 0 ? "0" : "1"),
                ]))
        }
        let appleEnvironment = environment == .production ? "Production" : "Sandbox"
        let body: [String: JSONValue] = [
            "notification_type": .string(v1Type), "password": password.map(JSONValue.string) ?? .null,
            "environment": .string(environment == .production ? "PROD" : "Sandbox"), "bid": .string(bundleID), "bvrs": .string("1"),
            "auto_renew_status": .string(renewal?["autoRenewStatus"]?.intValue == 0 ? "false" : "true"),
            "unified_receipt": .object([
                "status": .number(0), "environment": .string(appleEnvironment),
                "latest_receipt": .string(Data("mock latest receipt of \(bundleID)".utf8).base64EncodedString()),
                "latest_receipt_info": .array(latest), "pending_renewal_info": .array(pending),
            ]),
        ]
        return Array(JSONValue.object(body).encodedText.utf8)
    }
}
