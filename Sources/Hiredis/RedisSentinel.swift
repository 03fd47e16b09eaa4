import BaseSupport
import Dispatch
import Logging
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where to find the Redis primary when Redis Sentinel manages it.
///
/// ```swift
/// var config = RedisConfiguration()
/// config.sentinel = RedisSentinelConfiguration(
///     sentinels: [.init(host: "10.0.0.5", port: 26379), .init(host: "10.0.0.6", port: 26379)],
///     masterName: "receiptq")
/// ```
///
/// Every connection made from configurations that share this value asks the sentinels for the
/// primary's address when it connects, checks that the server there says it is the primary
/// (`ROLE`), and connects again — asking again — after an I/O error, a `READONLY`, `LOADING`,
/// `MASTERDOWN`, `NOREPLICAS` or `UNBLOCKED` reply, or a `+switch-master` announcement for
/// `masterName`, which one background thread per value listens for. A copy of the value shares that thread and the
/// switch count, so all pools and listeners of a process follow one failover together.
public struct RedisSentinelConfiguration: Sendable, CustomStringConvertible {
    /// One sentinel's address.
    public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
        /// Host name or IP address.
        public var host: String
        /// TCP port (sentinels listen on 26379 by default).
        public var port: Int

        /// Creates an address.
        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port`.
        public var description: String { "\(host):\(port)" }

        /// Parses `host:port,host:port,…` (`REDIS_SENTINELS`); a missing port is 26379.
        ///
        /// - Returns: The endpoints, or nil when an entry is empty or its port is not 1…65535.
        public static func list(_ text: String) -> [Endpoint]? {
            let entries = text.split(separator: ",", omittingEmptySubsequences: false).map {
                String($0.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
            }
            var endpoints: [Endpoint] = []
            for entry in entries {
                guard !entry.isEmpty else { return nil }
                guard let colon = entry.lastIndex(of: ":") else {
                    endpoints.append(Endpoint(host: entry, port: 26379))
                    continue
                }
                let host = String(entry[..<colon])
                guard !host.isEmpty, let port = Int(entry[entry.index(after: colon)...]), (1...65535).contains(port) else { return nil }
                endpoints.append(Endpoint(host: host, port: port))
            }
            return endpoints.isEmpty ? nil : endpoints
        }
    }

    /// The sentinels to ask, in order; one that does not answer is skipped.
    public var sentinels: [Endpoint]
    /// The name the sentinels monitor the primary under (`sentinel monitor <name> …`).
    public var masterName: String
    /// `AUTH` password for the sentinels (`requirepass` in sentinel.conf); `nil` skips `AUTH`.
    /// The data nodes' password is ``RedisConfiguration/password``.
    public var password: String?
    /// What every connection of this set-up shares: the switch count and its listener.
    let topology: SentinelTopology

    /// Creates the set-up.
    ///
    /// - Parameters:
    ///   - sentinels: At least one sentinel's address.
    ///   - masterName: The monitored primary's name.
    ///   - password: The sentinels' `AUTH` password, if they have one.
    public init(sentinels: [Endpoint], masterName: String, password: String? = nil) {
        self.sentinels = sentinels
        self.masterName = masterName
        self.password = password
        self.topology = SentinelTopology()
    }

    /// A log-safe rendering: the password shows as `<redacted>`.
    public var description: String {
        "sentinels \(sentinels.map(\.description).joined(separator: ",")) master \(masterName)"
            + (password == nil ? "" : " password <redacted>")
    }

    /// How many primary switches this process has heard of; a connection made before the last one
    /// connects again before its next command.
    public var switches: Int { topology.generation }
}

/// The state every connection of one ``RedisSentinelConfiguration`` shares.
final class SentinelTopology: Sendable {
    private let switchCount = Atomic<Int>(0)
    /// The primary the connections last found, so the listener can tell a switch it missed.
    private let lastPrimary = Mutex<RedisSentinelConfiguration.Endpoint?>(nil)

    var generation: Int { switchCount.load(ordering: .acquiring) }

    /// Records a switch: every connection connects again before its next command.
    func switched() { switchCount.add(1, ordering: .releasing) }

    /// A connection found the primary at `endpoint`.
    func found(_ endpoint: RedisSentinelConfiguration.Endpoint) { lastPrimary.withLock { $0 = endpoint } }

    /// Tells whether `endpoint` differs from the primary the connections use.
    func differs(from endpoint: RedisSentinelConfiguration.Endpoint) -> Bool {
        lastPrimary.withLock { $0 != nil && $0 != endpoint }
    }
}

/// Asks sentinels for the primary's address.
enum SentinelQuery {
    /// `SENTINEL get-master-addr-by-name` on `connection`.
    static func primary(on connection: RedisConnection, masterName: String) throws -> RedisSentinelConfiguration.Endpoint? {
        let reply = try connection.send(["SENTINEL", "get-master-addr-by-name", masterName])
        guard let parts = reply.array, parts.count == 2, let host = parts[0].string, let port = parts[1].string.flatMap({ Int($0) })
        else { return nil }
        return .init(host: host, port: port)
    }

    /// A short-lived connection to one sentinel, authenticated with the sentinels' password.
    static func connection(
        to endpoint: RedisSentinelConfiguration.Endpoint, password: String?, connectTimeout: Duration, commandTimeout: Duration?,
        logger: Logger
    ) -> RedisConnection {
        RedisConnection(
            unconnected: RedisConfiguration(
                host: endpoint.host, port: endpoint.port, password: password, connectTimeout: connectTimeout,
                commandTimeout: commandTimeout),
            label: "sentinel-\(endpoint)", logger: logger)
    }
}

/// The sentinels' `+switch-master` announcements, heard for every connection of one
/// ``RedisSentinelConfiguration``: on a switch each connects again before its next command, so a
/// primary that was cut off and demoted is left at once rather than on its first error. A
/// `Service` of the role's group; without it connections still find the new primary, on errors.
///
/// Its loop blocks for its whole life, so it runs on a thread of its own (`receiptq.switch`),
/// started in ``run()`` and ended (within a second) by graceful shutdown or cancellation.
public final class RedisSentinelWatch: Service {
    private let watcher: SentinelWatcher
    private let configuration: RedisSentinelConfiguration
    private let stopped = Atomic<Bool>(false)

    /// A watch of `configuration`'s sentinels; nil when it names none (one address, nothing to watch).
    public init?(configuration: RedisConfiguration, logger: Logger) {
        guard let sentinel = configuration.sentinel else { return nil }
        self.configuration = sentinel
        self.watcher = SentinelWatcher(
            topology: sentinel.topology, sentinels: sentinel.sentinels, masterName: sentinel.masterName, password: sentinel.password,
            connectTimeout: configuration.connectTimeout, logger: logger)
    }

    /// Listens until graceful shutdown or cancellation.
    public func run() async throws {
        await withTaskCancellationOrGracefulShutdownHandler {
            await NamedThread.run("receiptq.switch") { [self] in watcher.run(until: { stopped.load(ordering: .acquiring) }) }
        } onCancelOrGracefulShutdown: { [self] in
            stopped.store(true, ordering: .releasing)
        }
    }
}

/// The `+switch-master` listener: subscribed to one sentinel at a time, the next after a failure.
private struct SentinelWatcher: Sendable {
    weak var topology: SentinelTopology?
    let sentinels: [RedisSentinelConfiguration.Endpoint]
    let masterName: String
    let password: String?
    let connectTimeout: Duration
    let logger: Logger

    func run(until stopped: () -> Bool) {
        var index = 0
        var failures = 0
        while topology != nil, !stopped() {
            let endpoint = sentinels[index % sentinels.count]
            let connection = SentinelQuery.connection(
                to: endpoint, password: password, connectTimeout: connectTimeout, commandTimeout: .seconds(5), logger: logger)
            defer { connection.close() }
            do {
                // A switch announced while nobody listened is caught by comparing addresses.
                if let primary = try SentinelQuery.primary(on: connection, masterName: masterName),
                    topology?.differs(from: primary) == true
                {
                    logger.notice("Redis primary moved while the sentinel listener was away", metadata: ["redis.primary": "\(primary)"])
                    topology?.switched()
                }
                try connection.subscribe("+switch-master")
                failures = 0
                while let topology, !stopped() {
                    guard let message = try connection.nextMessage(timeout: .seconds(1)) else { continue }
                    // ["message", "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>"]
                    guard case .array(let parts) = message, parts.count == 3, let payload = parts[2].string else { continue }
                    let fields = payload.split(separator: " ")
                    guard fields.count == 5, fields[0] == masterName else { continue }
                    logger.notice("Redis primary switched", metadata: ["redis.primary": "\(fields[3]):\(fields[4])"])
                    topology.switched()
                }
            } catch {
                failures += 1
                index += 1
                if failures == sentinels.count {
                    logger.warning("No sentinel answers; connections still re-discover on errors", error: error)
                }
                usleep(UInt32(min(1_000_000, 100_000 * failures)))
            }
        }
    }
}
