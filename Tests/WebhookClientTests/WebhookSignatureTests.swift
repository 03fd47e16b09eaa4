import Curl
import DevTools
import Foundation
import MockAppStore
import SystemTesting
import Testing
import WebhookClient

@Suite("Webhook signatures and the public-address rule", .blockingWork)
struct WebhookSignatureTests {
    /// The README's test vector: a backend can check its own verification code against it.
    static let vector = (
        secret: "whsec_receiptq_test_vector", timestamp: Int64(1_764_115_200),
        body: #"{"id":"019abc00-0000-7000-8000-000000000001","type":"subscription.renewed"}"#,
        header: "t=1764115200,v1=a0f37be3e607d3505a0c7c568cf05b76fd1d0699e0f9171f14d2a593b0425ae6"
    )

    @Test("The README's test vector: the header receiptq sends, and a receiver's check accepts it")
    func testVector() {
        let vector = Self.vector
        let header = WebhookSignature.header(body: Array(vector.body.utf8), timestamp: vector.timestamp, secrets: [vector.secret])
        #expect(header == vector.header)
        let then = Date(timeIntervalSince1970: TimeInterval(vector.timestamp + 10))
        #expect(WebhookReceiver.verify(header: header, body: Array(vector.body.utf8), secret: vector.secret, now: then))
    }

    @Test("A changed body, another secret, or a stale timestamp is rejected; during a rotation either secret verifies")
    func rejections() {
        let body = Array(#"{"a":1}"#.utf8)
        let now = Date()
        let t = Int64(now.timeIntervalSince1970)
        let header = WebhookSignature.header(body: body, timestamp: t, secrets: ["new", "old"])
        #expect(header.split(separator: ",").count == 3)
        #expect(WebhookReceiver.verify(header: header, body: body, secret: "new", now: now))
        #expect(WebhookReceiver.verify(header: header, body: body, secret: "old", now: now))
        #expect(!WebhookReceiver.verify(header: header, body: Array(#"{"a":2}"#.utf8), secret: "new", now: now))
        #expect(!WebhookReceiver.verify(header: header, body: body, secret: "other", now: now))
        #expect(!WebhookReceiver.verify(header: header, body: body, secret: "new", now: now.addingTimeInterval(600)))
        #expect(!WebhookReceiver.verify(header: "v1=deadbeef", body: body, secret: "new", now: now))
    }

    @Test("Only public unicast addresses pass; loopback, private, link-local, CGNAT, multicast and mapped forms of them do not")
    func publicAddresses() {
        let refused: [[UInt8]] = [
            [127, 0, 0, 1], [10, 1, 2, 3], [172, 16, 0, 1], [172, 31, 255, 255], [192, 168, 1, 1], [169, 254, 169, 254], [100, 64, 0, 1],
            [0, 0, 0, 0], [224, 0, 0, 1], [255, 255, 255, 255], [198, 18, 0, 1],
            Array(repeating: 0, count: 15) + [1], Array(repeating: 0, count: 16), [0xFE, 0x80] + Array(repeating: 0, count: 14),
            [0xFC, 0x00] + Array(repeating: 0, count: 14), [0xFD, 0x12] + Array(repeating: 0, count: 14),
            Array(repeating: 0, count: 10) + [0xFF, 0xFF, 127, 0, 0, 1], Array(repeating: 0, count: 10) + [0xFF, 0xFF, 169, 254, 169, 254],
            [0x00, 0x64, 0xFF, 0x9B] + Array(repeating: 0, count: 8) + [10, 0, 0, 1], [0xFF, 0x02] + Array(repeating: 0, count: 14),
            [0x20, 0x01, 0x0D, 0xB8] + Array(repeating: 0, count: 12), [1, 2, 3],
        ]
        for address in refused { #expect(!PublicAddressPolicy.isPublic(address), "\(address)") }
        let allowed: [[UInt8]] = [
            [8, 8, 8, 8], [17, 253, 144, 10], [172, 32, 0, 1], [100, 128, 0, 1],
            [0x26, 0x06, 0x47, 0x00] + Array(repeating: 0, count: 11) + [1],
            Array(repeating: 0, count: 10) + [0xFF, 0xFF, 8, 8, 4, 4],
        ]
        for address in allowed { #expect(PublicAddressPolicy.isPublic(address), "\(address)") }
        #expect(PublicAddressPolicy.resolve("127.0.0.1") == [[127, 0, 0, 1]])
        #expect(PublicAddressPolicy.resolve("localhost").allSatisfy { !PublicAddressPolicy.isPublic($0) })
        // Names under localhost are loopback whether or not they resolve here (RFC 6761).
        for host in ["localhost", "localhost.", "foo.localhost", "FOO.LocalHost.", "a.b.localhost"] {
            #expect(PublicAddressPolicy.resolvesOnlyPrivately(host), "\(host)")
        }
        for host in ["notlocalhost", "localhost.example", "localhostx"] { #expect(!PublicAddressPolicy.isLoopbackName(host), "\(host)") }
    }
}
