import HummingbirdCore
import Logging
import Metrics
import NIOCore
import NIOHTTPTypes

/// Hummingbird's HTTP/1.1 server with every connection kept to ``ConnectionLimits``: the listeners
/// receiptq runs in production (serve's API port, any role's `METRICS_PORT`) are built with it.
///
/// ```swift
/// let app = Application(
///     router: router, server: GuardedHTTPServer.http1(limits, listener: .api, metrics: exporter, logger: logger),
///     configuration: .init(address: .hostname("127.0.0.1", port: 8080)))
/// ```
public enum GuardedHTTPServer {
    /// An HTTP/1.1 server builder for `Application(router:server:…)`.
    /// - Parameters:
    ///   - limits: the timeouts and the connection cap.
    ///   - listener: which listener it is (the `listener` label of its metrics).
    ///   - metrics: where its connections, refusals and timeouts are counted.
    ///   - logger: where a refusal at the cap is said (at most once every ten seconds).
    public static func http1(_ limits: ConnectionLimits, listener: HTTPListener, metrics: any MetricsFactory, logger: Logger) -> HTTPServerBuilder {
        let guardian = ListenerGuard(limits: limits, listener: listener, metrics: metrics, logger: logger)
        return HTTPServerBuilder { responder in GuardedHTTP1Channel(responder: responder, listener: guardian) }
    }
}

/// Hummingbird's ``HTTP1Channel`` with the guard's handlers around its HTTP codec: the connection
/// cap checked on accept, a ``RequestStartDetector`` in front of the decoder, a
/// ``ConnectionDeadlineHandler`` after it.
struct GuardedHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    let listener: ListenerGuard

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard listener.admit() else {
            // Closed at once: a connection left in the accept queue would wait with its client.
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(ConnectionRefusal.tooManyConnections)
        }
        let listener = self.listener
        channel.closeFuture.whenComplete { _ in listener.release() }
        do {
            let deadlines = ConnectionDeadlineHandler(limits: listener.limits, listener: listener)
            try channel.pipeline.syncOperations.addHandler(RequestStartDetector(deadlines: deadlines), position: .first)
            // Hummingbird adds its extra handlers after the codec, where the deadlines read HTTP parts.
            let handler = NIOLoopBound(deadlines, eventLoop: channel.eventLoop)
            return HTTP1Channel(responder: responder, configuration: .init(additionalChannelHandlers: [handler.value]))
                .setup(channel: channel, logger: logger)
        } catch {
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(error)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: value, logger: logger)
    }
}
