import Foundation
import ReceiptCore
import Testing

@Suite("Client addresses behind trusted proxies; the guessing policy's lock-outs")
struct TrustedProxiesTests {
    let proxies = TrustedProxies(header: "X-Forwarded-For")

    @Test("The right-most forwarded address that is not a trusted proxy is the client; an untrusted peer's header is ignored")
    func rightMostUntrusted() {
        // A load balancer on 10.0.0.5 forwarding for a client that wrote its own header first.
        #expect(proxies.client(peer: "10.0.0.5", forwarded: "1.2.3.4, 198.51.100.7") == "198.51.100.7")
        // Two proxies of ours in the chain.
        #expect(proxies.client(peer: "127.0.0.1", forwarded: "198.51.100.7, 10.1.2.3") == "198.51.100.7")
        // A client on the internet cannot be anyone else by writing the header.
        #expect(proxies.client(peer: "203.0.113.66", forwarded: "198.51.100.7") == "203.0.113.66")
        // No header configured: the peer, whatever is sent.
        #expect(TrustedProxies(header: nil).client(peer: "127.0.0.1", forwarded: "198.51.100.7") == "127.0.0.1")
        // Junk stops the walk at the last address the proxies vouch for.
        #expect(proxies.client(peer: "10.0.0.5", forwarded: "198.51.100.7, not-an-ip") == "10.0.0.5")
        #expect(proxies.client(peer: "10.0.0.5", forwarded: "") == "10.0.0.5")
        // Every entry one of ours: the left-most.
        #expect(proxies.client(peer: "10.0.0.5", forwarded: "10.9.9.9, 192.168.1.1") == "10.9.9.9")
        // IPv6 and IPv4-mapped peers.
        #expect(proxies.client(peer: "::1", forwarded: "2001:db8::7") == "2001:db8::7")
        #expect(proxies.client(peer: "::ffff:10.0.0.5", forwarded: "198.51.100.7") == "198.51.100.7")
        #expect(proxies.client(peer: nil, forwarded: "198.51.100.7") == nil)
    }

    @Test("Networks: CIDR and bare addresses parse; bad entries are named")
    func networks() throws {
        let parsed = try TrustedProxies.parse(" 10.20.0.0/16, 2001:db8::/32 ,192.0.2.1").get()
        let custom = TrustedProxies(header: "X-Real-IP", networks: parsed)
        #expect(custom.isTrusted("10.20.255.1") && !custom.isTrusted("10.21.0.1"))
        #expect(custom.isTrusted("2001:db8:ffff::1") && !custom.isTrusted("2001:db9::1"))
        #expect(custom.isTrusted("192.0.2.1") && !custom.isTrusted("192.0.2.2"))
        #expect(!custom.isTrusted("127.0.0.1"))
        #expect(TrustedProxies.parse("10.0.0.0/33") == .failure(.init(entry: "10.0.0.0/33")))
        #expect(TrustedProxies.parse("10.0.0.0/8, example.com") == .failure(.init(entry: "example.com")))
        #expect(TrustedProxies.parse("::/0").map(\.count) == .success(1))
        #expect(TrustedProxies(header: "X", networks: try TrustedProxies.parse("0.0.0.0/0").get()).isTrusted("8.8.8.8"))
        #expect(TrustedProxies.privateNetworks.count == 6)
    }

    @Test("Lock-outs: none while free, then doubling from the first to the longest")
    func lockouts() {
        let policy = GuessingPolicy(freeFailuresPerAddress: 5, firstLockout: .seconds(1), longestLockout: .seconds(900))
        #expect(policy.lockout(afterFailures: 5, free: 5) == .zero)
        #expect(policy.lockout(afterFailures: 6, free: 5) == .seconds(1))
        #expect(policy.lockout(afterFailures: 7, free: 5) == .seconds(2))
        #expect(policy.lockout(afterFailures: 15, free: 5) == .seconds(512))
        #expect(policy.lockout(afterFailures: 16, free: 5) == .seconds(900))
        #expect(policy.lockout(afterFailures: 1_000_000, free: 5) == .seconds(900))
        let now = Date(timeIntervalSince1970: 1_900_000_000)
        #expect(GuessingPolicy.retryAfter(until: now.addingTimeInterval(0.2), now: now) == 1)
        #expect(GuessingPolicy.retryAfter(until: now.addingTimeInterval(4.5), now: now) == 5)
    }
}
