import OpenSSL
import SystemTesting
import Testing

@Suite("OpenSSL façade: secrets sealed at rest (AES-256-GCM)", .blockingWork)
struct SecretBoxTests {
    @Test("A sealed secret opens with the same key and context only, and never seals to the same bytes twice")
    func sealAndOpen() throws {
        let box = try SecretBox(key: SecureRandom.bytes(32))
        let secret = Array("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n".utf8)
        let sealed = try box.seal(secret, context: Array("app-1".utf8))
        #expect(box.open(sealed, context: Array("app-1".utf8)) == secret)
        #expect(try box.seal(secret, context: Array("app-1".utf8)) != sealed)
        #expect(!sealed.containsSubsequence(Array("PRIVATE KEY".utf8)))
        #expect(box.open(sealed, context: Array("app-2".utf8)) == nil)
        #expect(try SecretBox(key: SecureRandom.bytes(32)).open(sealed, context: Array("app-1".utf8)) == nil)
        for index in [0, 5, sealed.count / 2, sealed.count - 1] {
            var altered = sealed
            altered[index] ^= 0x01
            #expect(box.open(altered, context: Array("app-1".utf8)) == nil)
        }
        #expect(box.open(Array(sealed.prefix(20)), context: []) == nil)
        #expect(box.open([], context: []) == nil)
    }

    @Test("Only a 32-byte key makes a box; an empty secret round-trips")
    func keyLength() throws {
        #expect(throws: OpenSSLError.self) { try SecretBox(key: [UInt8](repeating: 1, count: 16)) }
        let box = try SecretBox(key: [UInt8](repeating: 7, count: 32))
        #expect(box.open(try box.seal([], context: []), context: []) == [])
    }
}

extension Array where Element == UInt8 {
    fileprivate func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard needle.count <= count else { return false }
        return (0...(count - needle.count)).contains { Array(self[$0..<($0 + needle.count)]) == needle }
    }
}
