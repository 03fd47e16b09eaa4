import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import SystemTesting
import Testing

/// The failed-authentication throttle's rules, held by both implementations: the process's own
/// (the fallback while Redis is down) and the one every replica shares in Redis.
@Suite("Guessing throttle: the contract of every implementation", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct GuessingThrottleContractTests {
    static let policy = GuessingPolicy(
        freeFailuresPerAddress: 3, freeFailuresPerAccount: 5, firstLockout: .seconds(2), longestLockout: .seconds(60), memory: .seconds(600))
    let start = Date(timeIntervalSince1970: 1_900_000_000)

    /// Two views of one throttle, as two API replicas have (the local one is one process: the same
    /// object twice), and a clean-up.
    struct Shared {
        let first: any GuessingThrottle
        let second: any GuessingThrottle
        let close: () -> Void
    }

    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case local, redis
        var testDescription: String { rawValue }

        func make() throws -> Shared {
            switch self {
            case .local:
                let throttle = LocalGuessingThrottle(policy: GuessingThrottleContractTests.policy)
                return Shared(first: throttle, second: throttle, close: {})
            case .redis:
                let configuration = RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)
                let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
                let pools = [RedisConnectionPool(configuration: configuration, size: 2), RedisConnectionPool(configuration: configuration, size: 2)]
                let admin = try RedisConnection(configuration: configuration)
                return Shared(
                    first: RedisGuessingThrottle(pool: pools[0], keys: keys, policy: GuessingThrottleContractTests.policy),
                    second: RedisGuessingThrottle(pool: pools[1], keys: keys, policy: GuessingThrottleContractTests.policy),
                    close: {
                        _ = try? RedisCleanup.deleteKeys(prefix: keys.prefix, admin)
                        admin.close()
                        for pool in pools { pool.close() }
                    })
            }
        }
    }

    @Test(
        "An address is closed after its free failures, for a doubling lock-out; another address and another door stay open", arguments: Kind.allCases)
    func addressLockout(_ kind: Kind) async throws {
        let throttle = try kind.make()
        defer { throttle.close() }
        let attacker = AuthAttempt(door: .dashboardLogin, address: "203.0.113.66", account: "admin")
        for _ in 0..<3 {
            #expect(try await throttle.first.verdict(for: attacker, now: start) == .open)
            #expect(try await throttle.first.recordFailure(attacker, now: start) == .open)
        }
        // The fourth failure closes the address for the first lock-out; the other replica sees it.
        #expect(try await throttle.first.recordFailure(attacker, now: start) == .closed(retryAfter: 2))
        #expect(try await throttle.second.verdict(for: attacker, now: start.addingTimeInterval(1)) == .closed(retryAfter: 1))
        #expect(try await throttle.second.verdict(for: attacker, now: start.addingTimeInterval(2)) == .open)
        // The next failure doubles it.
        #expect(try await throttle.second.recordFailure(attacker, now: start.addingTimeInterval(2)) == .closed(retryAfter: 4))
        // The same account from an address that never failed, and the attacker at another door: open.
        let operatorElsewhere = AuthAttempt(door: .dashboardLogin, address: "198.51.100.7", account: "admin")
        #expect(try await throttle.first.verdict(for: operatorElsewhere, now: start.addingTimeInterval(3)) == .open)
        let otherDoor = AuthAttempt(door: .clientToken, address: "203.0.113.66")
        #expect(try await throttle.first.verdict(for: otherDoor, now: start.addingTimeInterval(3)) == .open)
        // Lock-outs stop doubling at the cap.
        var now = start.addingTimeInterval(10)
        var last = ThrottleVerdict.open
        for _ in 0..<12 {
            last = try await throttle.first.recordFailure(attacker, now: now)
            now = now.addingTimeInterval(61)
        }
        #expect(last == .closed(retryAfter: 60))
    }

    @Test("An account is closed after failures from many addresses, but only to addresses that failed", arguments: Kind.allCases)
    func accountLockout(_ kind: Kind) async throws {
        let throttle = try kind.make()
        defer { throttle.close() }
        // A botnet: one guess per address, five addresses, against one softphone account.
        for index in 0..<5 {
            let guess = AuthAttempt(door: .softphone, address: "203.0.113.\(index)", account: "phone-1")
            #expect(try await throttle.first.recordFailure(guess, now: start) == .open)
        }
        let sixth = AuthAttempt(door: .softphone, address: "203.0.113.5", account: "phone-1")
        #expect(try await throttle.second.recordFailure(sixth, now: start) == .closed(retryAfter: 2))
        // An address that failed is closed for the account, though it failed only once...
        let again = AuthAttempt(door: .softphone, address: "203.0.113.0", account: "phone-1")
        #expect(try await throttle.second.verdict(for: again, now: start.addingTimeInterval(1)) == .closed(retryAfter: 1))
        // ...not for another account; and the phone's own address, which never failed, is open.
        #expect(
            try await throttle.second.verdict(for: AuthAttempt(door: .softphone, address: "203.0.113.0", account: "phone-2"), now: start) == .open)
        #expect(try await throttle.first.verdict(for: AuthAttempt(door: .softphone, address: "192.0.2.10", account: "phone-1"), now: start) == .open)
        // Operators are one namespace at both of their doors: the admin API's failures count at the login form.
        for index in 0..<5 {
            _ = try await throttle.first.recordFailure(AuthAttempt(door: .adminAPI, address: "203.0.114.\(index)", account: "ops"), now: start)
        }
        let form = AuthAttempt(door: .dashboardLogin, address: "203.0.114.9", account: "ops")
        #expect(try await throttle.first.recordFailure(form, now: start) == .closed(retryAfter: 2))
    }

    @Test("Failures are forgotten a while after the last one", arguments: Kind.allCases)
    func memory(_ kind: Kind) async throws {
        let throttle = try kind.make()
        defer { throttle.close() }
        let attempt = AuthAttempt(door: .adminAPI, address: "2001:db8::1", account: "ops")
        for _ in 0..<3 { _ = try await throttle.first.recordFailure(attempt, now: start) }
        // 600 s later the three failures are gone: three more are free again.
        let later = start.addingTimeInterval(601)
        for _ in 0..<3 { #expect(try await throttle.first.recordFailure(attempt, now: later) == .open) }
        #expect(try await throttle.first.recordFailure(attempt, now: later) == .closed(retryAfter: 2))
    }
}
