import DevTools
import Foundation
import Hiredis
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Redis over TLS through a local stunnel client, as ops/README.md "Redis over TLS" deploys it
/// (Debian's hiredis 0.14 speaks no TLS): receiptq talks plain Redis to 127.0.0.1, stunnel
/// verifies the server's certificate and carries it over TLS to Redis's `tls-port`.
@Suite("Redis over TLS through stunnel", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RedisTLSTunnelTests {
    /// `stunnel4` in client mode, foreground, from a config like ops/redis/stunnel-receiptq.conf.
    final class Tunnel: @unchecked Sendable {
        let port: Int
        private let pid: pid_t
        private let log: URL

        /// Starts stunnel and waits until it listens.
        static func start(to redisTLSPort: Int, trusting ca: String, directory: URL) async throws -> Tunnel {
            let tunnel = try Tunnel(to: redisTLSPort, trusting: ca, directory: directory)
            // Listening once a plain TCP connect gets through.
            let listening = try await eventually(timeout: .seconds(10)) {
                guard
                    let connection = try? RedisConnection(
                        configuration: RedisConfiguration(host: "127.0.0.1", port: tunnel.port, connectTimeout: .milliseconds(200)),
                        label: "it-tunnel-probe")
                else { return false }
                connection.close()
                return true
            }
            if listening { return tunnel }
            tunnel.stop()
            throw RestartTestError("stunnel did not listen: \(tail(tunnel.log))")
        }

        private init(to redisTLSPort: Int, trusting ca: String, directory: URL) throws {
            port = try freeLoopbackPort()
            log = directory.appendingPathComponent("stunnel-\(port).log")
            let configuration = directory.appendingPathComponent("stunnel-\(port).conf")
            try """
            foreground = yes
            pid =
            output = \(log.path)
            debug = notice
            [redis]
            client = yes
            accept = 127.0.0.1:\(port)
            connect = 127.0.0.1:\(redisTLSPort)
            verifyChain = yes
            CAfile = \(ca)
            checkHost = localhost
            sslVersionMin = TLSv1.2
            """.write(to: configuration, atomically: true, encoding: .utf8)
            pid = try spawn(["stunnel4", configuration.path], log: directory.appendingPathComponent("stunnel-\(port).out").path)
        }

        /// What stunnel logged.
        var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

        func stop() {
            kill(pid, SIGTERM)
            if waitForChild(pid, timeout: 5) == nil {
                kill(pid, SIGKILL)
                _ = waitForChild(pid)
            }
        }
    }

    @Test("receiptq stores a receipt through stunnel to Redis's TLS port; a tunnel that cannot verify the server's certificate carries nothing (503)")
    func throughTheTunnel() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-tls-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        // A CA, and a certificate for `localhost` / 127.0.0.1 it signed; and an unrelated CA.
        let certificates = try LocalhostTLS(
            in: directory.appendingPathComponent("good"), names: ["localhost", "127.0.0.1"], authority: "receiptq test CA")
        let stranger = try LocalhostTLS(in: directory.appendingPathComponent("other"), authority: "stranger test CA")
        let tlsPort = try freeLoopbackPort()
        let redis = try ThrowawayRedis(extraArguments: [
            "--tls-port", String(tlsPort), "--tls-cert-file", certificates.certificate, "--tls-key-file", certificates.key,
            "--tls-ca-cert-file", certificates.ca, "--tls-auth-clients", "no",
        ])
        defer { redis.destroy() }

        let tunnel = try await Tunnel.start(to: tlsPort, trusting: certificates.ca, directory: directory)
        defer { tunnel.stop() }
        let system = try await TestSystem.start(environment: ["REDIS_PORT": String(tunnel.port)])
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let (status, resource) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        #expect(status == 200, "\(String(describing: resource))")
        #expect(resource?["validation_status"]?.stringValue == "valid")
        // What went through the tunnel is in this Redis (the one behind the TLS port).
        let direct = try RedisConnection(configuration: RedisConfiguration(host: "127.0.0.1", port: redis.port), label: "it-tls-direct")
        defer { direct.close() }
        let prefix = system.configuration.keys.prefix
        #expect((try direct.send(["KEYS", "\(prefix):idem:*"]).array ?? []).count == 1)

        // A tunnel trusting another CA refuses the server: receiptq gets no Redis, and says 503.
        let distrusting = try await Tunnel.start(to: tlsPort, trusting: stranger.ca, directory: directory)
        defer { distrusting.stop() }
        let refused = try await TestSystem.start(environment: ["REDIS_PORT": String(distrusting.port), "REDIS_CONNECT_TIMEOUT_MS": "500"])
        defer { Task { await refused.stop() } }
        let (other, _) = try refused.forgeReceipt()
        let (refusedStatus, _) = try await refused.post(#"{"receipt":"\#(other)"}"#)
        #expect(refusedStatus == 503)
        // Refused for the certificate, not for anything else.
        #expect(distrusting.logText.lowercased().contains("certificate verify failed"), "\(distrusting.logText)")
    }
}
