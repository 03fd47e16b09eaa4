import Foundation
import Libpq
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// `receiptq apps` on real Postgres: several tokens per app, each revocable on its own, rotation,
/// and what the API's token check (``PostgresCatalog``) makes of them.
@Suite("App admin: apps and their API tokens", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct AppAdminTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    let admin: AppAdmin

    init() throws {
        configuration = try TestSystem.migratedDatabase()
        connection = try PostgresConnection(configuration: configuration.postgres)
        admin = AppAdmin(connection: connection)
    }

    /// The app a token authenticates as, asked of a catalog with an empty cache: the API's own
    /// catalog trusts a token it has seen for 30 s, which would hide a revocation.
    func authenticates(_ token: String) async throws -> UUID? {
        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        return try await PostgresCatalog(pool: pool).authenticate(token: token)?.id
    }

    func uniqueBundleID() -> String { "com.example.admin.\(UUID().uuidString.prefix(8).lowercased())" }

    @Test("The name defaults to the bundle id")
    func nameDefaultsToBundleID() throws {
        let bundleID = uniqueBundleID()
        let (app, _) = try admin.addApp(bundleID: bundleID, sharedSecret: nil)
        #expect(app.name == bundleID)
        #expect(try admin.app(named: bundleID)?.id == app.id)
    }

    @Test("An app family keeps its other bundle ids; a bundle id that is not reverse-DNS text is refused")
    func bundleIDs() throws {
        let main = uniqueBundleID()
        let (app, _) = try admin.addApp(bundleID: main, otherBundleIDs: [main + ".mac", main], sharedSecret: nil)
        #expect(app.bundleIDs == [main, main + ".mac"])
        #expect(try admin.app(named: main)?.bundleIDs == [main, main + ".mac"], "read back from Postgres")
        for bad in ["", "com.example app", "com.example,app", "com.\"quoted\"", "com.example.{x}", String(repeating: "a", count: 156)] {
            #expect(throws: AppAdminError.invalidBundleID) { try admin.addApp(bundleID: main + ".x", otherBundleIDs: [bad], sharedSecret: nil) }
        }
        #expect(throws: AppAdminError.invalidBundleID) { try admin.addApp(bundleID: "bad id", sharedSecret: nil) }
    }

    @Test("An app may hold several tokens; revoking one leaves the others working")
    func severalTokensRevokeOne() async throws {
        let (app, first) = try admin.addApp(name: "admin-\(UUID().uuidString)", bundleID: uniqueBundleID(), sharedSecret: "s")
        let second = try admin.rotateToken(appID: app.id, revokingOthers: false)
        let third = try admin.rotateToken(appID: app.id, revokingOthers: false)
        for token in [first, second, third] { #expect(try await authenticates(token) == app.id) }

        let revoked = try admin.revokeToken(appID: app.id, prefix: String(second.prefix(7)))
        #expect(revoked.prefix == String(second.prefix(7)))
        #expect(!revoked.isActive)
        #expect(try await authenticates(second) == nil)
        #expect(try await authenticates(first) == app.id)
        #expect(try await authenticates(third) == app.id)

        // The listing counts them and shows prefixes, never tokens.
        let tokens = try #require(try admin.tokens()[app.id])
        #expect(tokens.filter(\.isActive).map(\.prefix) == [first, third].map { String($0.prefix(7)) })
        #expect(tokens.filter { !$0.isActive }.count == 1)

        // The whole token works as well as its prefix.
        try admin.revokeToken(appID: app.id, prefix: third)
        #expect(try await authenticates(third) == nil)
        #expect(try await authenticates(first) == app.id)
    }

    @Test("A running API's catalog keeps trusting a token it has seen until its cache time passes")
    func cachedCatalogLagsBehindRevocation() async throws {
        let (app, token) = try admin.addApp(name: "admin-\(UUID().uuidString)", bundleID: uniqueBundleID(), sharedSecret: nil)
        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        let cached = PostgresCatalog(pool: pool)
        #expect(try await cached.authenticate(token: token)?.id == app.id)
        try admin.revokeToken(appID: app.id, prefix: String(token.prefix(7)))
        // Documented on revokeToken and in `apps revoke-token --help`: up to 30 s more.
        #expect(try await cached.authenticate(token: token)?.id == app.id)
        #expect(try await authenticates(token) == nil)
    }

    @Test("Revoking refuses a malformed, unknown, already revoked, ambiguous or other app's prefix, and revokes nothing then")
    func revokeRefusals() async throws {
        let (app, token) = try admin.addApp(name: "admin-\(UUID().uuidString)", bundleID: uniqueBundleID(), sharedSecret: nil)
        let (other, otherToken) = try admin.addApp(name: "admin-\(UUID().uuidString)", bundleID: uniqueBundleID(), sharedSecret: nil)
        let prefix = String(token.prefix(7))

        #expect(throws: AppAdminError.malformedPrefix) { try admin.revokeToken(appID: app.id, prefix: "xx_abcd") }
        #expect(throws: AppAdminError.malformedPrefix) { try admin.revokeToken(appID: app.id, prefix: String(token.prefix(9))) }
        #expect(throws: AppAdminError.noActiveToken) { try admin.revokeToken(appID: app.id, prefix: String(otherToken.prefix(7))) }
        #expect(throws: AppAdminError.noActiveToken) { try admin.revokeToken(appID: other.id, prefix: token) }
        #expect(try await authenticates(token) == app.id)
        #expect(try await authenticates(otherToken) == other.id)

        // Two active tokens sharing a prefix (1 in 65,536 per pair by chance; forced here).
        let twin = try admin.rotateToken(appID: app.id, revokingOthers: false)
        _ = try await connection.query("UPDATE api_tokens SET prefix = \(prefix) WHERE app_id = \(app.id)")
        #expect(throws: AppAdminError.ambiguousPrefix) { try admin.revokeToken(appID: app.id, prefix: prefix) }
        #expect(try await authenticates(token) == app.id)
        // The catalog finds a token by its own prefix; a twin's real prefix is its first characters.
        _ = try await connection.query(
            "UPDATE api_tokens SET prefix = \(String(twin.prefix(7))) WHERE token_sha256 = \(Digest.sha256(Array(twin.utf8)))")
        #expect(try await authenticates(twin) == app.id)
        _ = try await connection.query("UPDATE api_tokens SET prefix = \(prefix) WHERE app_id = \(app.id)")

        try admin.revokeToken(appID: app.id, prefix: twin)
        try admin.revokeToken(appID: app.id, prefix: prefix)
        #expect(throws: AppAdminError.noActiveToken) { try admin.revokeToken(appID: app.id, prefix: prefix) }
    }

    @Test("Rotating revokes every older token of the app, and only of that app")
    func rotate() async throws {
        let (app, first) = try admin.addApp(name: "admin-\(UUID().uuidString)", bundleID: uniqueBundleID(), sharedSecret: nil)
        let second = try admin.rotateToken(appID: app.id, revokingOthers: false)
        let (other, otherToken) = try admin.addApp(name: "admin-\(UUID().uuidString)", bundleID: uniqueBundleID(), sharedSecret: nil)
        let rotated = try admin.rotateToken(appID: app.id, revokingOthers: true)
        #expect(try await authenticates(first) == nil)
        #expect(try await authenticates(second) == nil)
        #expect(try await authenticates(rotated) == app.id)
        #expect(try await authenticates(otherToken) == other.id)
        let tokens = try #require(try admin.tokens()[app.id])
        #expect(tokens.filter(\.isActive).count == 1)
        #expect(tokens.filter { !$0.isActive }.count == 2)
    }
}
