import Foundation

/// Where the integration suites find their servers, read from the environment.
///
/// The variable names follow postgres-nio and swift-jobs, so `scripts/services env` output drives the
/// app, the tests and CI alike. Integration suites are gated with
/// `.enabled(if: TestEnvironment.integrationEnabled)`; with `REQUIRE_INTEGRATION=1` (set by
/// `scripts/test` and CI) a missing server is a failure, not a skip.
public enum TestEnvironment {
    private static var env: [String: String] { ProcessInfo.processInfo.environment }

    /// Redis host (`REDIS_HOSTNAME`, default `127.0.0.1`).
    public static var redisHost: String { env["REDIS_HOSTNAME"] ?? "127.0.0.1" }
    /// Redis port (`REDIS_PORT`, default `16379`: the port `scripts/services` uses).
    public static var redisPort: Int { env["REDIS_PORT"].flatMap(Int.init) ?? 16379 }
    /// Postgres host (`POSTGRES_HOSTNAME`, default `127.0.0.1`).
    public static var postgresHost: String { env["POSTGRES_HOSTNAME"] ?? "127.0.0.1" }
    /// Postgres port (`POSTGRES_PORT`, default `15432`: the port `scripts/services` uses).
    public static var postgresPort: Int { env["POSTGRES_PORT"].flatMap(Int.init) ?? 15432 }
    /// Postgres user (`POSTGRES_USER`, default `receiptq`).
    public static var postgresUser: String { env["POSTGRES_USER"] ?? "receiptq" }
    /// Postgres password (`POSTGRES_PASSWORD`, default none: trust auth on loopback).
    public static var postgresPassword: String? { env["POSTGRES_PASSWORD"] }
    /// Postgres database for tests (`POSTGRES_TEST_DB`, default `receiptq_test`).
    public static var postgresDatabase: String { env["POSTGRES_TEST_DB"] ?? "receiptq_test" }

    /// True when a missing server must fail the run (`REQUIRE_INTEGRATION=1`, set by CI).
    public static var integrationRequired: Bool { env["REQUIRE_INTEGRATION"] == "1" }

    /// Whether integration suites run: always when required, otherwise when Redis answers on its port.
    public static var integrationEnabled: Bool {
        integrationRequired || canConnect(host: redisHost, port: redisPort)
    }

    /// The shared App Store test data (`../shared/testdata/appstore` seen from the package root),
    /// or nil when that folder is absent. Override with `RECEIPTQ_TESTDATA`.
    public static var appStoreTestData: URL? {
        if let path = env["RECEIPTQ_TESTDATA"] { return URL(fileURLWithPath: path) }
        var dir = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { dir.deleteLastPathComponent() }  // Sources/ReceiptTesting/<file> → package root
        let candidate = dir.deletingLastPathComponent().appendingPathComponent("shared/testdata/appstore")
        return FileManager.default.fileExists(atPath: candidate.path) ? candidate : nil
    }

    private static func canConnect(host: String, port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &addr.sin_addr) == 1 else { return false }
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
