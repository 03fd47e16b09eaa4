import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Closes a connection whose client is too slow: its request head not whole within the header
/// timeout, its body slower than the minimum rate, or a kept-alive connection idle too long. Sits
/// after the HTTP codec (it sees request and response parts), with a ``RequestStartDetector`` in
/// front of the codec telling it when the bytes of a next request begin.
///
/// One timer per connection, armed for the earliest deadline and re-armed when it fires early (a
/// body's bytes only move its deadline later), so a request rarely costs a timer of its own.
///
/// The server's own slowness is never the client's: while a response is being prepared nothing is
/// timed, and while the server holds back reading (its request handler has not asked for more of
/// the body yet) the clock of the head or body stops.
final class ConnectionDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// What the client is sending.
    private enum Inbound {
        /// A request head, since `since`; `started`: some of its bytes arrived (a silent
        /// connection is closed without an answer, a partial head is answered 408).
        case head(since: NIODeadline, started: Bool)
        /// The body of the request whose head arrived at `since`, `bytes` of it so far.
        case body(since: NIODeadline, bytes: Int)
        /// Nothing: the last request was read whole.
        case between
    }

    private let listener: ListenerGuard
    private let headerTimeout: TimeAmount
    private let bodyTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    private let bodyRate: Int

    private var context: ChannelHandlerContext?
    private var inbound: Inbound = .head(since: .now(), started: false)
    /// Request heads read and response heads written: a request is answered while fewer
    /// responses than requests have begun, and open until its response ends.
    private var requestHeads = 0
    private var responseHeads = 0
    private var responsesEnded = 0
    /// When the connection last had no request in hand (the kept-alive wait starts there).
    private var quietSince = NIODeadline.now()
    /// Since when the server has held back reading, after a read completed (nil: it asked for more).
    private var heldSince: NIODeadline?
    /// A response said `Connection: close`: the connection ends with it.
    private var closeAfterResponse = false
    private var closing = false
    private var timer: Scheduled<Void>?
    private var timerDeadline: NIODeadline?

    init(limits: ConnectionLimits, listener: ListenerGuard) {
        self.listener = listener
        headerTimeout = TimeAmount(limits.headerTimeout)
        bodyTimeout = TimeAmount(limits.bodyTimeout)
        idleTimeout = TimeAmount(limits.idleTimeout)
        bodyRate = limits.bodyMinimumBytesPerSecond
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // The connection was just accepted: its first head is due within the header timeout.
        let now = NIODeadline.now()
        inbound = .head(since: now, started: false)
        quietSince = now
        arm()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        disarm()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        context.fireChannelInactive()
    }

    /// The ``RequestStartDetector`` saw bytes arrive: after a kept-alive wait, a new request's head begins.
    func bytesArrived() {
        switch inbound {
        case .between:
            inbound = .head(since: .now(), started: true)
            arm()
        case .head(let since, started: false):
            inbound = .head(since: since, started: true)
        case .head, .body:
            break
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            requestHeads += 1
            inbound = .body(since: .now(), bytes: 0)
            // The body's deadline may come before the head's (a short body timeout).
            arm()
        case .body(let buffer):
            if case .body(let since, let bytes) = inbound { inbound = .body(since: since, bytes: bytes + buffer.readableBytes) }
        case .end:
            inbound = .between
            // Answered before its body was read (a 401, a 413): the kept-alive wait starts now.
            if responsesEnded >= requestHeads {
                quietSince = .now()
                arm()
            }
        }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // A head or body being read: if the server does not ask for more now, the wait is its own.
        if case .between = inbound {} else { heldSince = .now() }
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if let held = heldSince {
            heldSince = nil
            let pause = NIODeadline.now() - held
            switch inbound {
            case .head(let since, let started): inbound = .head(since: since + pause, started: started)
            case .body(let since, let bytes): inbound = .body(since: since + pause, bytes: bytes)
            case .between: break
            }
        }
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let response):
            if response.status.kind != .informational { responseHeads += 1 }
            if let connection = response.headerFields[.connection], connection.lowercased().contains("close") { closeAfterResponse = true }
            context.write(data, promise: promise)
        case .body:
            context.write(data, promise: promise)
        case .end:
            responsesEnded += 1
            guard responsesEnded >= requestHeads else {
                context.write(data, promise: promise)
                return
            }
            if closeAfterResponse {
                // Hummingbird would read on (a 413's body, up to 99999999999 bytes): the answer said close.
                closing = true
                disarm()
                let written = context.eventLoop.makePromise(of: Void.self)
                context.writeAndFlush(data, promise: written)
                written.futureResult.cascade(to: promise)
                written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                return
            }
            context.write(data, promise: promise)
            quietSince = .now()
            arm()
        }
    }

    /// The next deadline and what it bounds; nil while the server owes a response and the client
    /// sends nothing.
    private func deadline(now: NIODeadline) -> (at: NIODeadline, phase: TimeoutPhase)? {
        let held = heldSince.map { now - $0 } ?? .zero
        switch inbound {
        case .head(let since, _):
            return (since + headerTimeout + held, .header)
        case .body(let since, let bytes):
            return (since + bodyTimeout + credit(bytes) + held, .body)
        case .between:
            return responsesEnded < requestHeads ? nil : (quietSince + idleTimeout, .idle)
        }
    }

    /// The time `bytes` of body buy at the minimum rate (as Apache's mod_reqtimeout `MinRate`).
    private func credit(_ bytes: Int) -> TimeAmount {
        guard bodyRate > 0 else { return .zero }
        return .seconds(Int64(bytes / bodyRate)) + .nanoseconds(Int64(bytes % bodyRate) * 1_000_000_000 / Int64(bodyRate))
    }

    /// Schedules the check at the next deadline unless one is due sooner.
    private func arm() {
        guard let context, !closing, let next = deadline(now: .now()) else { return }
        if let timerDeadline, timerDeadline <= next.at { return }
        timer?.cancel()
        timerDeadline = next.at
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: next.at) { self.fire() }
    }

    private func disarm() {
        timer?.cancel()
        timer = nil
        timerDeadline = nil
    }

    private func fire() {
        timer = nil
        timerDeadline = nil
        guard let context, !closing else { return }
        let now = NIODeadline.now()
        guard let next = deadline(now: now) else { return }
        guard next.at <= now else { return arm() }
        closing = true
        listener.timedOut(next.phase)
        // A 408 when the client is mid-request and nothing of a response was written yet; a silent
        // or idle connection is closed without a word.
        let answer: Bool
        switch inbound {
        case .head(_, let started): answer = started && responsesEnded >= requestHeads
        case .body: answer = responseHeads < requestHeads && responsesEnded + 1 >= requestHeads
        case .between: answer = false
        }
        guard answer else { return context.close(promise: nil) }
        let head = HTTPResponse(status: .requestTimeout, headerFields: [.connection: "close", .contentLength: "0"])
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: written)
        written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

/// In front of the HTTP decoder: tells the ``ConnectionDeadlineHandler`` that bytes arrived, so the
/// header timeout of a kept-alive connection's next request starts at its first byte.
final class RequestStartDetector: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let deadlines: ConnectionDeadlineHandler

    init(deadlines: ConnectionDeadlineHandler) {
        self.deadlines = deadlines
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        deadlines.bytesArrived()
        context.fireChannelRead(data)
    }
}
