import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import OpenSSL
import ReceiptCore
import ServiceLifecycle
import Synchronization

/// A backend's webhook receiver, as the demo, the tests and the benchmark need one: it checks
/// each delivery's `Receiptq-Signature` against its secret, records what arrived, and can be told
/// to misbehave (fail a share of deliveries at random, be down, answer slowly).
public final class WebhookReceiver: Sendable {
    /// One request that reached the receiver.
    public struct Delivery: Sendable {
        public var eventID: String
        public var type: String
        /// The body as parsed (nil when it was not JSON).
        public var event: JSONValue?
        public var signatureValid: Bool
        /// What the receiver answered: 2xx means the delivery counts.
        public var status: Int
        public var receivedAt: Date
    }

    /// How the receiver behaves now.
    public struct Behaviour: Sendable {
        /// The share of deliveries answered 500 at random.
        public var failureRate: Double = 0
        /// Answer 503 to everything (an outage).
        public var down = false
        /// Wait this long before answering.
        public var delay: Duration = .zero
        /// Keep each delivery's body (tests); the benchmark only counts.
        public var keepBodies = true

        /// Creates a behaviour (defaults: answers 200 at once).
        public init(failureRate: Double = 0, down: Bool = false, delay: Duration = .zero, keepBodies: Bool = true) {
            self.failureRate = failureRate
            self.down = down
            self.delay = delay
            self.keepBodies = keepBodies
        }
    }

    private struct State {
        var deliveries: [Delivery] = []
        var behaviour = Behaviour()
        var secret: String
        var accepted = 0
    }

    private let state: Mutex<State>
    private let onDelivery: @Sendable (Delivery) -> Void
    public let path = "/hooks/receiptq"

    /// Creates a receiver that accepts deliveries signed with `secret`.
    /// - Parameter onDelivery: told of each delivery as it is answered (the demo logs them).
    public init(secret: String, onDelivery: @escaping @Sendable (Delivery) -> Void = { _ in }) {
        state = Mutex(State(secret: secret))
        self.onDelivery = onDelivery
    }

    /// Every delivery so far, in arrival order.
    public var deliveries: [Delivery] { state.withLock { $0.deliveries } }
    /// How many deliveries were answered 2xx.
    public var accepted: Int { state.withLock { $0.accepted } }
    /// Changes how the receiver behaves from the next delivery on.
    public func behave(_ behaviour: Behaviour) { state.withLock { $0.behaviour = behaviour } }
    /// Changes the secret checked (after `webhooks rotate-secret`).
    public func setSecret(_ secret: String) { state.withLock { $0.secret = secret } }

    /// The receiver's HTTP application on `host:port` (0: any free port).
    public func application(
        host: String = "127.0.0.1", port: Int = 0, logger: Logger = Logger(label: "webhook-receiver"),
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        router.post(RouterPath(path)) { request, _ -> Response in
            try await self.receive(request)
        }
        return Application(
            router: router, configuration: .init(address: .hostname(host, port: port)),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) }, logger: logger)
    }

    private func receive(_ request: Request) async throws -> Response {
        let body = Array(try await request.body.collect(upTo: 1 << 20).readableBytesView)
        let header = request.headers[HTTPField.Name("Receiptq-Signature")!] ?? ""
        let (behaviour, secret) = state.withLock { ($0.behaviour, $0.secret) }
        if behaviour.delay > .zero { try await Task.sleep(for: behaviour.delay) }
        let valid = Self.verify(header: header, body: body, secret: secret)
        let status: HTTPResponse.Status =
            !valid
            ? .unauthorized : behaviour.down ? .serviceUnavailable : Double.random(in: 0..<1) < behaviour.failureRate ? .internalServerError : .ok
        let delivery = Delivery(
            eventID: request.headers[HTTPField.Name("Receiptq-Event-Id")!] ?? "", type: request.headers[HTTPField.Name("Receiptq-Event-Type")!] ?? "",
            event: behaviour.keepBodies ? try? JSONValue.parse(body) : nil, signatureValid: valid, status: Int(status.code), receivedAt: Date())
        state.withLock { state in
            if behaviour.keepBodies { state.deliveries.append(delivery) }
            if status == .ok { state.accepted += 1 }
        }
        onDelivery(delivery)
        return Response(status: status)
    }

    /// The check a backend makes (README: Events and webhooks): HMAC-SHA256 of `"<t>.<body>"`
    /// with the secret, compared in constant time with each `v1`, `t` within five minutes.
    public static func verify(header: String, body: [UInt8], secret: String, now: Date = Date()) -> Bool {
        var timestamp: Int64?
        var signatures: [String] = []
        for part in header.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map(String.init)
            guard pair.count == 2 else { continue }
            if pair[0] == "t" { timestamp = Int64(pair[1]) } else if pair[0] == "v1" { signatures.append(pair[1]) }
        }
        guard let timestamp, abs(now.timeIntervalSince1970 - Double(timestamp)) <= 300 else { return false }
        let expected = Array(Digest.hex(Digest.hmacSHA256(key: Array(secret.utf8), Array("\(timestamp).".utf8) + body)).utf8)
        return signatures.contains { Digest.constantTimeEqual(Array($0.utf8), expected) }
    }

    /// Starts the receiver in the background; returns its URL and the task running it.
    public func start(
        host: String = "127.0.0.1", logger: Logger = Logger(label: "webhook-receiver")
    ) async throws -> (url: String, task: Task<Void, any Error>) {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = application(host: host, port: 0, logger: logger) { port in
            continuation.yield(port)
            continuation.finish()
        }
        let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: logger)
        let task = Task(executorPreference: ServerThreads.shared) { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw WebhookReceiverError(message: "webhook receiver did not start")
        }
        return ("http://\(host):\(port)\(path)", task)
    }
}

/// The receiver could not be started.
public struct WebhookReceiverError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { "WebhookReceiverError: \(message)" }
}
