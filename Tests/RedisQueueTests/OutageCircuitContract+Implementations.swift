import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import Testing

/// An implementation of `OutageCircuit` that ``OutageCircuitContractTests`` holds to the contract.
enum CircuitImplementation: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// `ReceiptTesting`'s `MemoryOutageCircuit`, the worker tests' double.
    case memory
    /// `RedisOutageCircuit`, production's: the rules in the Lua script.
    case redis

    /// What this run can test: the memory double always, Redis when a server answers (always with
    /// `REQUIRE_INTEGRATION=1`, so that a missing server fails the run instead of shrinking it).
    static var available: [CircuitImplementation] { TestEnvironment.integrationEnabled ? allCases : [.memory] }

    var testDescription: String { rawValue }

    /// A new circuit, closed and empty, whose lanes all share it.
    func circuit(policy: CircuitPolicy = CircuitPolicy()) throws -> any SharedCircuit {
        switch self {
        case .memory: MemorySharedCircuit(policy: policy)
        case .redis: try RedisSharedCircuit(policy: policy)
        }
    }
}

/// One circuit under test, and what a test may look at beside its lanes.
protocol SharedCircuit: AnyObject {
    /// Another lane on this circuit, as a lane of another worker process sees it: it has seen
    /// nothing yet.
    func lane() throws -> any OutageCircuit
    /// The calls and outages the window holds in one bucket.
    func counts(inBucket index: Int64) throws -> (calls: Int, failures: Int)
    /// Whether the circuit stores nothing: closed, with an empty window and no probe lease.
    func isEmpty() throws -> Bool
    /// Releases what the circuit holds (connections, keys).
    func close()
}

extension SharedCircuit {
    /// `count` new lanes.
    func lanes(_ count: Int) throws -> [any OutageCircuit] { try (0..<count).map { _ in try lane() } }
}

/// The memory double: every lane shares the first lane's state.
final class MemorySharedCircuit: SharedCircuit {
    private let root: MemoryOutageCircuit

    init(policy: CircuitPolicy) { root = MemoryOutageCircuit(policy: policy) }

    func lane() -> any OutageCircuit { root.sharingLane() }

    func counts(inBucket index: Int64) -> (calls: Int, failures: Int) { root.snapshot.counts(inBucket: index) }

    func isEmpty() -> Bool { root.snapshot == CircuitState() }

    func close() {}
}

/// Production's circuit: each lane on its own connection, all under a prefix unique to the test.
final class RedisSharedCircuit: SharedCircuit {
    let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
    let admin: RedisConnection
    private let policy: CircuitPolicy
    private var connections: [RedisConnection] = []

    init(policy: CircuitPolicy) throws {
        self.policy = policy
        admin = try RedisConnection(configuration: Self.configuration)
    }

    static var configuration: RedisConfiguration {
        RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)
    }

    func lane() throws -> any OutageCircuit {
        let connection = try RedisConnection(configuration: Self.configuration)
        connections.append(connection)
        return RedisOutageCircuit(connection: connection, keys: keys, policy: policy)
    }

    func counts(inBucket index: Int64) throws -> (calls: Int, failures: Int) {
        let counts = try admin.send(["HMGET", keys.circuitCalls(bucket: index), "c", "f"]).array ?? []
        return (counts.first?.int ?? 0, counts.dropFirst().first?.int ?? 0)
    }

    func isEmpty() throws -> Bool { try circuitKeys().isEmpty }

    /// The circuit's keys currently in Redis.
    func circuitKeys() throws -> [String] {
        try admin.send(["KEYS", "\(keys.prefix):circuit:*"]).array?.compactMap(\.string).sorted() ?? []
    }

    func close() {
        if let found = try? circuitKeys(), !found.isEmpty { _ = try? admin.send(["DEL"] + found) }
        for connection in connections { connection.close() }
        admin.close()
    }
}
