import DevTools
import Foundation
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Who a purchase belongs to, end to end: an app account token mapped to a user attaches a
/// purchase Apple reports alone (a V2 notification signed by the mock's chain), the app's transfer
/// rule decides a transaction a second user presents, and aliases merge user ids into one customer;
/// each answered by name by `GET /client/customers/{user}`.
@Suite("Identity: app account tokens, transfer rules, aliases", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct IdentityTests {
    let admin = AdminAPITests()

    /// The client API with the system's bearer token (PUT and POST with a JSON body).
    func client(_ system: TestSystem, _ method: String, _ path: String, body: String) async throws -> AdminAPITests.Answer {
        try await admin.send(system, method, path, authorization: "Bearer \(system.token)", body: body)
    }

    func entitlementIDs(_ system: TestSystem, _ user: String) async throws -> [String] {
        let (status, body) = try await system.get(path: "/client/customers/\(user)")
        #expect(status == 200)
        return body?["entitlements"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
    }

    func owner(_ system: TestSystem, transaction id: String) throws -> String? {
        let connection = try system.postgres()
        defer { connection.close() }
        return try connection.query("SELECT user_identifier FROM in_app_purchases WHERE transaction_id = \(id)").rows.first?
            .string("user_identifier")
    }

    /// The app's notification URL set up in the mock (V2, signed by the mock's chain).
    func subscribe(_ system: TestSystem) throws {
        let connection = try system.postgres()
        defer { connection.close() }
        let token = try AppAdmin(connection: connection).rotateNotificationToken(appID: system.app.id)
        system.mock.state.notifications.setTarget(
            .init(url: "http://127.0.0.1:\(system.apiPort)/apple/notifications/\(system.app.name)/\(token)", version: "v2", retryDelaySeconds: 0.2),
            bundleID: system.app.bundleID)
    }

    func define(_ system: TestSystem, _ entitlement: String, products: [String]) async throws {
        let body = JSONValue.object(["products": .array(products.map(JSONValue.string))]).encodedText
        let answer = try await admin.send(system, "PUT", "/admin/api/apps/\(system.app.id.canonical)/entitlements/\(entitlement)", body: body)
        #expect(answer.status == 200)
    }

    /// A purchase known only to the mock App Store, signed with `token` as its app account token
    /// (an offer code redeemed in the App Store: `offerType` 3).
    func storePurchase(_ system: TestSystem, product: String, days: Double?, token: UUID) throws -> String {
        let (_, payload) = try system.signedTransaction(product: product, days: days)
        let id = try #require(payload["transactionId"]?.stringValue)
        system.mock.state.serverAPI.update(transaction: id, in: .sandbox) {
            $0["appAccountToken"] = .string(token.canonical)
            $0["offerType"] = .number(3)
            $0["offerIdentifier"] = .string("SPRING")
        }
        return id
    }

    @Test(
        "An offer code redeemed in the App Store by a user known only by app account token: the V2 notification's purchase is that user's, with the entitlement by name"
    )
    func notificationOnlyPurchase() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        try subscribe(system)
        try await define(system, "pro", products: ["com.example.yearly"])
        try await define(system, "lifetime", products: ["com.example.lifetime"])

        // Registered before the purchase: the worker attaches it when it applies the notification.
        let token = UUID()
        let registered = try await client(
            system, "PUT", "/client/users/id-offer-user/app-account-token", body: #"{"app_account_token": "\#(token.canonical)"}"#)
        #expect(registered.status == 200)
        #expect(registered.json?["attached_purchases"]?.intValue == 0)
        let subscription = try storePurchase(system, product: "com.example.yearly", days: 30, token: token)
        #expect(
            try system.mock.state.notifications.event(
                type: "SUBSCRIBED", subtype: "INITIAL_BUY", transactionID: subscription, environment: .sandbox) != nil)
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "id-offer-user") == ["pro"] })
        #expect(try owner(system, transaction: subscription) == "id-offer-user")

        // Registered after: the purchase was stored without a user, and the registration attaches
        // it (and only it) in its own transaction.
        let later = UUID()
        let lifetime = try storePurchase(system, product: "com.example.lifetime", days: nil, token: later)
        #expect(try system.mock.state.notifications.event(type: "ONE_TIME_CHARGE", transactionID: lifetime, environment: .sandbox) != nil)
        #expect(try await eventually(timeout: .seconds(30)) { try await system.queuesIdle([.notification]) })
        #expect(
            try await eventually(timeout: .seconds(30)) {
                let connection = try system.postgres()
                defer { connection.close() }
                return try connection.query("SELECT 1 AS found FROM in_app_purchases WHERE transaction_id = \(lifetime)").rows.count == 1
            })
        #expect(try owner(system, transaction: lifetime) == nil)
        #expect(try await entitlementIDs(system, "id-late-user").isEmpty)
        let attached = try await client(
            system, "PUT", "/client/users/id-late-user/app-account-token", body: #"{"app_account_token": "\#(later.canonical)"}"#)
        #expect(attached.status == 200)
        #expect(attached.json?["attached_purchases"]?.intValue == 1)
        #expect(try await entitlementIDs(system, "id-late-user") == ["lifetime"])
        // The same mapping again is a no-op; the token for another user is refused.
        #expect(
            try await client(system, "PUT", "/client/users/id-late-user/app-account-token", body: #"{"app_account_token": "\#(later.canonical)"}"#)
                .json?["attached_purchases"]?.intValue == 0)
        #expect(
            try await client(system, "PUT", "/client/users/someone-else/app-account-token", body: #"{"app_account_token": "\#(later.canonical)"}"#)
                .status == 409)
        #expect(try await entitlementIDs(system, "someone-else").isEmpty)
    }

    @Test(
        "Bad input names its field: an app account token that is not a UUID (body of a transaction or the registration), an unknown member, an alias equal to the user"
    )
    func refusals() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        let (jws, _) = try system.signedTransaction()
        let (status, body) = try await system.post(
            #"{"signed_transaction": "\#(jws)", "user_identifier": "u", "app_account_token": "not-a-uuid"}"#, path: "/client/transactions")
        #expect(status == 422)
        #expect(body?["errors"]?.arrayValue?.first?["field"]?.stringValue == "app_account_token")
        let receipt = try await system.post(#"{"receipt": "MIIC", "app_account_token": 7}"#)
        #expect(receipt.1?["errors"]?.arrayValue?.contains { $0["field"]?.stringValue == "app_account_token" } == true)
        let put = try await client(system, "PUT", "/client/users/u/app-account-token", body: #"{"app_account_token": "zzz"}"#)
        #expect(put.status == 422)
        #expect(put.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == "app_account_token")
        let unknown = try await client(system, "PUT", "/client/users/u/app-account-token", body: #"{"token": "\#(UUID().canonical)"}"#)
        #expect(unknown.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == "token")
        let same = try await client(system, "POST", "/client/users/u/aliases", body: #"{"alias": "u"}"#)
        #expect(same.status == 422)
        #expect(same.json?["errors"]?.arrayValue?.first?["field"]?.stringValue == "alias")
        #expect(try await client(system, "POST", "/client/users/u/aliases", body: #"{}"#).status == 422)
        // Not a string (JSON's `false` is no user id "false").
        #expect(try await client(system, "POST", "/client/users/u/aliases", body: #"{"alias": false}"#).status == 422)
    }

    /// The same transaction presented by `user`, signed again (a later `signedDate`), so the door
    /// does not answer it as the earlier presentation.
    func present(_ system: TestSystem, _ payload: JSONValue, user: String, signedLater seconds: Double) async throws {
        var fields = payload.objectValue ?? [:]
        fields["signedDate"] = .number(((Date().timeIntervalSince1970 + seconds) * 1000).rounded())
        let jws = try TestSystem.sharedJWSAuthority.get().sign(.object(fields))
        let (status, _) = try await system.post(
            JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string(user)]).encodedText, path: "/client/transactions")
        #expect([200, 206].contains(status))
    }

    func setRule(_ system: TestSystem, _ rule: String) async throws {
        let answer = try await admin.send(system, "PUT", "/admin/api/apps/\(system.app.id.canonical)/transfer-rule", body: #"{"rule": "\#(rule)"}"#)
        #expect(answer.status == 200)
        #expect(answer.json?["rule"]?.stringValue == rule)
    }

    @Test("transfer_to_latest: the second user takes the subscription, both get customer.transferred; share: both are entitled")
    func transferRules() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        try await define(system, "pro", products: ["com.example.yearly"])
        try await define(system, "lifetime", products: ["com.example.lifetime"])
        #expect(
            try await admin.send(system, "PUT", "/admin/api/apps/\(system.app.id.canonical)/transfer-rule", body: #"{"rule": "all"}"#).status == 422)
        try await setRule(system, "transfer_to_latest")

        let (_, subscription) = try system.signedTransaction()
        let id = try #require(subscription["transactionId"]?.stringValue)
        try await present(system, subscription, user: "tr-first", signedLater: 0)
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "tr-first") == ["pro"] })
        try await present(system, subscription, user: "tr-second", signedLater: 1)
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "tr-second") == ["pro"] })
        #expect(try await entitlementIDs(system, "tr-first").isEmpty)
        #expect(try owner(system, transaction: id) == "tr-second")
        for user in ["tr-first", "tr-second"] {
            let told = try await eventually(timeout: .seconds(30)) {
                let (_, events) = try await system.get(path: "/client/events?user_identifier=\(user)&type=customer.transferred")
                let data = events?["events"]?.arrayValue?.first?["data"]
                return events?["events"]?.arrayValue?.count == 1 && data?["from_user_identifier"]?.stringValue == "tr-first"
                    && data?["to_user_identifier"]?.stringValue == "tr-second"
            }
            #expect(told, "\(user) is told once")
        }

        try await setRule(system, "share")
        let (_, lifetime) = try system.signedTransaction(product: "com.example.lifetime", days: nil)
        try await present(system, lifetime, user: "sh-first", signedLater: 0)
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "sh-first") == ["lifetime"] })
        try await present(system, lifetime, user: "sh-second", signedLater: 1)
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "sh-second") == ["lifetime"] })
        #expect(try await entitlementIDs(system, "sh-first") == ["lifetime"])
        let (shareOwner, conflict, audited) = try sharedRow(system, transaction: lifetime["transactionId"]?.stringValue ?? "")
        #expect(shareOwner == "sh-first")
        #expect(conflict == false)
        #expect(audited == 2, "each change of the rule is audited")
    }

    /// Found by the conformance suite (shared_apple_account): the door's idempotency record held
    /// the job alone, so a second app user signed in to the same Apple account on the same device
    /// (the same JWS) got the first user's answer back and their claim never reached the worker:
    /// no `purchase.conflict` under keep_first, no entitlement under share, no transfer. The record
    /// now carries who claimed the bytes (a hash); the same proof re-posted without a user is still
    /// the same receipt (StoreKit2Tests, ImportCommandTests).
    @Test("The same signed bytes presented by a second app user are that user's claim; the same user again is one receipt")
    func sameBytesSecondUser() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        try await define(system, "lifetime", products: ["com.example.lifetime"])
        let (jws, payload) = try system.signedTransaction(product: "com.example.lifetime", days: nil)
        func post(_ user: String) async throws -> JSONValue? {
            let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string(user)]).encodedText
            let (status, answer) = try await system.post(body, path: "/client/transactions")
            #expect(status == 200)
            return answer
        }
        let first = try await post("sb-first")
        #expect(try await post("sb-first")?["id"] == first?["id"], "the same user's same bytes: the same receipt")
        let second = try await post("sb-second")
        #expect(second?["id"] != first?["id"])
        #expect(second?["user_identifier"]?.stringValue == "sb-second")
        let told = try await eventually(timeout: .seconds(30)) {
            let (_, events) = try await system.get(path: "/client/events?user_identifier=sb-second&type=purchase.conflict")
            return events?["events"]?.arrayValue?.count == 1
        }
        #expect(told, "keep_first: the second user hears of the conflict")
        #expect(try owner(system, transaction: payload["transactionId"]?.stringValue ?? "") == "sb-first")
        #expect(try await entitlementIDs(system, "sb-second").isEmpty)

        try await setRule(system, "share")
        _ = try await post("sb-third")
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "sb-third") == ["lifetime"] })
    }

    /// Found by the conformance suite (shared_apple_account under Apple's 429s): receiptq judged
    /// two users' claims by the order their validations were stored, so Apple holding the first
    /// user's back gave the purchase to the second under keep_first. End to end: the first user's
    /// validation meets a 503 and waits in the retries (a backoff of an hour here, as after an
    /// outage), a second user presents the same subscription and is validated; when the retry goes
    /// through (an operator's retry now), the first user has it and the second is told of the
    /// conflict. The store's side, and transfer_to_latest's: IdentityStoreTests.claimOrder.
    @Test("keep_first by presentation: the first user keeps a purchase even when Apple held their validation past a second user's")
    func heldFirstClaim() async throws {
        let system = try await TestSystem.start(environment: ["RETRY_BASE_MS": "3600000"])
        defer { Task { await system.stop() } }
        try await define(system, "pro", products: ["com.example.yearly"])
        let (_, subscription) = try system.signedTransaction()
        let id = try #require(subscription["transactionId"]?.stringValue)
        system.mock.state.serverAPI.addRule(.init(count: 1, httpStatus: 503))
        try await present(system, subscription, user: "held-first", signedLater: 0)
        let retries = "/admin/api/retries?app_id=\(system.app.id)"
        #expect(try await eventually(timeout: .seconds(30)) { try await admin.send(system, "GET", retries).json?["total_matching"]?.intValue == 1 })

        try await present(system, subscription, user: "held-second", signedLater: 1)
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "held-second") == ["pro"] })
        #expect(try owner(system, transaction: id) == "held-second")

        let retried = try await admin.send(system, "POST", "/admin/api/retries/retry", body: #"{"all":true,"app_id":"\#(system.app.id)"}"#)
        #expect(retried.status == 200)
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "held-first") == ["pro"] })
        #expect(try await entitlementIDs(system, "held-second").isEmpty)
        #expect(try owner(system, transaction: id) == "held-first")
        let told = try await eventually(timeout: .seconds(30)) {
            let (_, events) = try await system.get(path: "/client/events?user_identifier=held-second&type=purchase.conflict")
            return events?["events"]?.arrayValue?.count == 1
        }
        #expect(told, "the second user hears of the conflict")
        let (_, moved) = try await system.get(path: "/client/events?user_identifier=held-first&type=customer.transferred")
        #expect(moved?["events"]?.arrayValue?.first?["data"]?["from_user_identifier"]?.stringValue == "held-second")
    }

    func sharedRow(_ system: TestSystem, transaction id: String) throws -> (owner: String?, conflict: Bool?, audited: Int?) {
        let connection = try system.postgres()
        defer { connection.close() }
        let row = try connection.query("SELECT user_identifier, is_conflict FROM in_app_purchases WHERE transaction_id = \(id)").rows.first
        let audited = try connection.query(
            "SELECT count(*) AS n FROM audit_log WHERE action = 'app.transfer_rule' AND app_id = \(system.app.id)"
        ).rows.first?.int("n")
        return (row?.string("user_identifier"), row?.bool("is_conflict"), audited)
    }

    @Test("An alias merges two customers: the alias's purchases move, either id answers the merged customer, a cycle is refused, chains resolve")
    func aliases() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        try await define(system, "pro", products: ["com.example.yearly"])
        try await define(system, "lifetime", products: ["com.example.lifetime"])
        let (subscriptionJWS, _) = try system.signedTransaction()
        let (lifetimeJWS, _) = try system.signedTransaction(product: "com.example.lifetime", days: nil)
        for (jws, user) in [(subscriptionJWS, "al-web"), (lifetimeJWS, "al-device")] {
            let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string(user)]).encodedText
            #expect([200, 206].contains(try await system.post(body, path: "/client/transactions").0))
        }
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "al-device") == ["lifetime"] })
        #expect(try await eventually(timeout: .seconds(30)) { try await entitlementIDs(system, "al-web") == ["pro"] })

        let merged = try await client(system, "POST", "/client/users/al-web/aliases", body: #"{"alias": "al-device"}"#)
        #expect(merged.status == 201)
        #expect(merged.json?["user_identifier"]?.stringValue == "al-web")
        #expect(merged.json?["moved_purchases"]?.intValue == 1)
        #expect(try await entitlementIDs(system, "al-web") == ["lifetime", "pro"])
        #expect(try await entitlementIDs(system, "al-device") == ["lifetime", "pro"])
        // Again: one customer already. The other way round: a cycle.
        #expect(try await client(system, "POST", "/client/users/al-web/aliases", body: #"{"alias": "al-device"}"#).status == 200)
        #expect(try await client(system, "POST", "/client/users/al-device/aliases", body: #"{"alias": "al-web"}"#).status == 409)
        // An alias of the alias belongs to the customer (no chain of two hops).
        #expect(try await client(system, "POST", "/client/users/al-device/aliases", body: #"{"alias": "al-tablet"}"#).status == 201)
        #expect(try await entitlementIDs(system, "al-tablet") == ["lifetime", "pro"])
        let told = try await eventually(timeout: .seconds(30)) {
            let (_, events) = try await system.get(path: "/client/events?user_identifier=al-web&type=customer.aliased")
            return events?["events"]?.arrayValue?.compactMap { $0["data"]?["alias"]?.stringValue }.sorted() == ["al-device", "al-tablet"]
        }
        #expect(told)
        // A purchase the alias presents from now on is filed for the customer.
        let (laterJWS, later) = try system.signedTransaction(product: "com.example.coins", days: nil)
        let body = JSONValue.object(["signed_transaction": .string(laterJWS), "user_identifier": .string("al-tablet")]).encodedText
        #expect([200, 206].contains(try await system.post(body, path: "/client/transactions").0))
        #expect(
            try await eventually(timeout: .seconds(30)) { try owner(system, transaction: later["transactionId"]?.stringValue ?? "") == "al-web" })
    }
}
