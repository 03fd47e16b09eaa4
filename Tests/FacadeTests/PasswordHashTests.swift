import Foundation
import OpenSSL
import SystemTesting
import Testing

@Suite("Operators' password hashes: scrypt (RFC 7914) in the PHC string format", .blockingWork)
struct PasswordHashTests {
    static func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString().replacingOccurrences(of: "=", with: "") }

    @Test("RFC 7914's test vector (N = 16384, r = 8, p = 1) verifies through the PHC string")
    func rfcVector() throws {
        let key = try #require(
            Digest.unhex(
                "7023bdcb3afd7348461c06cd81fd38ebfda8fbba904f8e3ea9b543f6545da1f2d5432955613f0fcf62d49705242a9af9e61e85dc0d651e40dfcf017b45575887"))
        let stored = "$scrypt$ln=14,r=8,p=1$\(Self.base64(Array("SodiumChloride".utf8)))$\(Self.base64(key))"
        #expect(PasswordHash.verify("pleaseletmein", against: stored))
        #expect(!PasswordHash.verify("pleaseletmeout", against: stored))
    }

    @Test("A hash verifies its password only; salts differ; tampered or unbounded strings verify nothing")
    func roundTrip() {
        let first = PasswordHash.hash("correct horse battery staple", cost: .testing)
        let second = PasswordHash.hash("correct horse battery staple", cost: .testing)
        #expect(first != second, "a random salt each time")
        #expect(first.hasPrefix("$scrypt$ln=10,r=8,p=1$") && !first.contains("horse"))
        #expect(PasswordHash.verify("correct horse battery staple", against: first))
        #expect(PasswordHash.verify("correct horse battery staple", against: second))
        #expect(!PasswordHash.verify("correct horse battery stapl", against: first))
        #expect(!PasswordHash.verify("", against: first))
        #expect(PasswordHash.verify("", against: PasswordHash.hash("", cost: .testing)), "an empty password is still hashed")
        #expect(PasswordHash.verify("pässwörd ✓", against: PasswordHash.hash("pässwörd ✓", cost: .testing)))
        var flipped = Array(first)
        flipped[flipped.count - 2] = flipped[flipped.count - 2] == "A" ? "B" : "A"
        #expect(!PasswordHash.verify("correct horse battery staple", against: String(flipped)))
        // A stored string must not make a login cost a gigabyte, a minute, or a crash.
        let parts = first.split(separator: "$").map(String.init)
        for params in ["ln=30,r=8,p=1", "ln=10,r=64,p=1", "ln=10,r=8,p=99", "ln=-1,r=8,p=1", "r=8,p=1", "ln=x,r=8,p=1"] {
            #expect(!PasswordHash.verify("correct horse battery staple", against: "$scrypt$\(params)$\(parts[2])$\(parts[3])"), "\(params)")
        }
        for junk in ["", "$", "$scrypt$", "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA", "plain text", "$scrypt$ln=10,r=8,p=1$!!$!!"] {
            #expect(!PasswordHash.verify("x", against: junk), "\(junk)")
        }
        #expect(PasswordHash.needsRehash(first) && !PasswordHash.needsRehash(PasswordHash.hash("x")))
    }

    @Test("Hex round-trips; odd lengths and non-hex digits are refused")
    func hex() {
        let bytes: [UInt8] = [0, 1, 0x7f, 0x80, 0xff]
        #expect(Digest.unhex(Digest.hex(bytes)) == bytes)
        #expect(Digest.unhex("ABcd") == [0xab, 0xcd])
        #expect(Digest.unhex("abc") == nil && Digest.unhex("zz") == nil && Digest.unhex("") == [])
    }
}
