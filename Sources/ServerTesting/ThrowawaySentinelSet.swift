import Foundation
import Hiredis
import SystemTesting

#if canImport(Glibc)
import Glibc
#endif

/// A Redis primary, two replicas and three sentinels of one test, as local processes on loopback.
/// The sentinels notice a dead primary after a second and fail over within a few more.
/// `destroy()` kills them all; call it in a `defer`.
public final class ThrowawaySentinelSet: @unchecked Sendable {
    public let masterName = "receiptq-it"
    /// The data nodes; the first starts as the primary.
    public let servers: [ThrowawayRedis]
    public let sentinels: [ThrowawayRedis]
    /// `requirepass` of the data nodes and of the sentinels (nil: none).
    public let password: String?

    /// - Parameter password: set, every data node and sentinel requires it (`requirepass`), the
    ///   replicas and sentinels authenticate with it.
    public init(password: String? = nil) throws {
        self.password = password
        let auth = password.map { ["--requirepass", $0, "--masterauth", $0] } ?? []
        let primary = try ThrowawayRedis(extraArguments: auth)
        var servers = [primary]
        var sentinels: [ThrowawayRedis] = []
        do {
            for _ in 0..<2 {
                servers.append(try ThrowawayRedis(extraArguments: ["--replicaof", "127.0.0.1", String(primary.port)] + auth))
            }
            let name = masterName
            let sentinelAuth = password.map { ["requirepass \($0)", "sentinel auth-pass \(name) \($0)"] } ?? []
            for _ in 0..<3 {
                sentinels.append(
                    try ThrowawayRedis(
                        sentinelConfiguration: sentinelAuth + [
                            "sentinel resolve-hostnames no",
                            "sentinel monitor \(masterName) 127.0.0.1 \(primary.port) 2",
                            "sentinel down-after-milliseconds \(masterName) 1000",
                            "sentinel failover-timeout \(masterName) 4000",
                            "sentinel parallel-syncs \(masterName) 2",
                        ]))
            }
        } catch {
            for server in servers + sentinels { server.destroy() }
            throw error
        }
        self.servers = servers
        self.sentinels = sentinels
    }

    deinit { destroy() }

    public func destroy() {
        for server in sentinels + servers { server.destroy() }
    }

    /// receiptq's settings for this set.
    public var environment: [String: String] {
        var environment = [
            "REDIS_SENTINELS": sentinels.map { "127.0.0.1:\($0.port)" }.joined(separator: ","), "REDIS_MASTER_NAME": masterName,
            // Set so that a receiptq ignoring the sentinels would fail loudly, not find some Redis.
            "REDIS_HOSTNAME": "127.0.0.1", "REDIS_PORT": "1",
        ]
        if let password {
            environment["REDIS_PASSWORD"] = password
            environment["REDIS_SENTINEL_PASSWORD"] = password
        }
        return environment
    }

    public func server(port: Int) -> ThrowawayRedis? { servers.first { $0.port == port } }

    /// What a sentinel says of the monitored primary (`SENTINEL MASTER`), as a dictionary.
    public func master(askingSentinel index: Int = 0) throws -> [String: String] {
        let connection = try RedisConnection(
            configuration: RedisConfiguration(host: "127.0.0.1", port: sentinels[index].port, password: password, commandTimeout: .seconds(2)),
            label: "it-sentinel")
        defer { connection.close() }
        let fields = try connection.send(["SENTINEL", "MASTER", masterName]).array?.compactMap(\.string) ?? []
        return Dictionary(stride(from: 0, to: fields.count - 1, by: 2).map { (fields[$0], fields[$0 + 1]) }, uniquingKeysWith: { $1 })
    }

    /// The primary's port as every sentinel names it, once they agree.
    public func agreedPrimaryPort() throws -> Int? {
        let ports = try sentinels.indices.map { Int(try master(askingSentinel: $0)["port"] ?? "") }
        return Set(ports).count == 1 ? ports[0] : nil
    }

    /// Waits until both replicas follow the primary and every sentinel knows them and the other two
    /// sentinels (a failover needs all of it).
    /// (A minute: a replica's first sync waits out the primary's diskless-sync delay, and CI's
    /// loaded run once took the replica test past 20 s.)
    public func waitUntilReady(timeout: Duration = .seconds(60)) async throws {
        var last: [String: String] = [:]
        let ready = try await eventually(timeout: timeout, interval: .milliseconds(200)) {
            let views = try sentinels.indices.map { try master(askingSentinel: $0) }
            last = views[0]
            return try views.allSatisfy({ $0["num-slaves"] == "2" && $0["num-other-sentinels"] == "2" && $0["flags"] == "master" })
                && servers.dropFirst().allSatisfy({ try replicationInfo($0.port).contains("master_link_status:up") })
        }
        if !ready { throw RestartTestError("sentinels not ready: \(last)") }
    }

    /// Waits until every sentinel names a primary other than `port` and that server says it is one.
    public func waitForFailover(from port: Int, timeout: Duration = .seconds(60)) async throws -> Int {
        var primary: Int?
        let failedOver = try await eventually(timeout: timeout, interval: .milliseconds(100)) {
            guard let agreed = try? agreedPrimaryPort(), agreed != port, (try? replicationInfo(agreed))?.contains("role:master") == true else {
                return false
            }
            primary = agreed
            return true
        }
        if failedOver, let primary { return primary }
        throw RestartTestError("no failover from \(port): \((try? master()) ?? [:])")
    }

    /// Who was primary when from `since` on, as the servers' logs tell it, in time order: the
    /// sentinels' failover steps (a replica chosen and promoted, a failover aborted, an instance
    /// turned back into a replica) and each data node's own role changes and full resyncs (a node
    /// that took writes as a primary and then resynced as a replica dropped them). For a failure
    /// message.
    public func roleTimeline(since: Date) -> [String] {
        let sentinelMarkers = [
            "+selected-slave", "+promoted-slave", "+switch-master", "+failover-end", "-failover-abort", "+convert-to-slave",
            "+elected-leader", "+odown",
        ]
        let nodeMarkers = ["MASTER MODE enabled", "Connecting to MASTER", "Full resync", "Flushing old data", "Discarding previously cached"]
        let lines =
            sentinels.flatMap { sentinel in sentinel.logLines(containing: sentinelMarkers).map { ("sentinel \(sentinel.port)", $0) } }
            + servers.flatMap { server in server.logLines(containing: nodeMarkers).map { ("redis \(server.port)", $0) } }
        // Each line is "<pid>:<role> <day> <month> <year> <hh:mm:ss.mmm> …", in the machine's time zone.
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.dateFormat = "d MMM yyyy HH:mm:ss.SSS"
        let stamped = lines.compactMap { server, line -> (Date, String)? in
            let words = line.split(separator: " ")
            guard words.count > 5, let at = format.date(from: words[1...4].joined(separator: " ")), at >= since else { return nil }
            return (at, "\(server): \(words[4]) \(words.dropFirst(5).joined(separator: " ").prefix(120))")
        }
        return stamped.sorted { $0.0 < $1.0 }.map(\.1)
    }

    /// `INFO replication` of the data node on `port`.
    public func replicationInfo(_ port: Int) throws -> String {
        let connection = try RedisConnection(
            configuration: RedisConfiguration(
                host: "127.0.0.1", port: port, password: password, connectTimeout: .milliseconds(500), commandTimeout: .seconds(2)),
            label: "it-replication")
        defer { connection.close() }
        return try connection.send(["INFO", "replication"]).string ?? ""
    }
}
