internal import CHiredis
import Dispatch
import FacadeSupport
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One blocking connection to Redis, built on hiredis.
///
/// The blocking methods (``send(_:)``, ``pipeline(_:)``) are for Dispatch worker threads; the async
/// ones (``command(_:)``, ``pipelined(_:)``) hop to the connection's own serial queue, so the
/// cooperative thread pool never blocks on the socket.
///
/// ```swift
/// let redis = try RedisConnection(configuration: .init(port: 6379))
/// _ = try redis.send(["LPUSH", "receipts:queue", payload])
/// let job = try redis.send(["BLMOVE", "receipts:queue", "receipts:processing", "RIGHT", "LEFT", "5"])
/// ```
///
/// After an I/O error, timeout or protocol error the hiredis context is unusable: it is freed, the
/// call throws, and the next call reconnects (and re-`AUTH`s) once before sending. Before each
/// command an idle connection checks that the server has not closed it (a restart, `SHUTDOWN`,
/// `CLIENT KILL`) and reconnects first if it has, so a Redis restart costs no call at all; a
/// server that vanished without closing (stopped, partitioned) costs one command timeout. A reply saying the server takes no
/// writes (`READONLY`, `LOADING`, `MASTERDOWN`, `NOREPLICAS`, `UNBLOCKED`) throws
/// ``RedisError/Code/failover`` and reconnects the same way; with
/// ``RedisConfiguration/sentinel`` every (re)connect asks the sentinels where the primary is, and a
/// `+switch-master` they announce reconnects the connection before its next command.
///
/// `@unchecked Sendable` is sound because every access to the hiredis context and the mutable
/// state below happens on `queue`, a private serial queue; hiredis itself is not thread-safe.
public final class RedisConnection: @unchecked Sendable {
    private let configuration: RedisConfiguration
    private let logger: Logger
    private let queue: ConfinedQueue

    // Confined to `queue`.
    private var context: UnsafeMutablePointer<redisContext>?
    private var isClosed = false
    /// The sentinel switch count when `context` connected; a later switch reconnects it.
    private var connectedSwitches = 0

    /// Connects to Redis, blocking for at most ``RedisConfiguration/connectTimeout``, and sends
    /// `AUTH` when a password is configured.
    ///
    /// - Parameters:
    ///   - configuration: Server address, password and timeouts.
    ///   - label: Names the connection's dispatch queue and its log metadata.
    ///   - logger: Receives reconnect events; defaults to the task-local `Logger.current`.
    /// - Throws: ``RedisError`` with code ``RedisError/Code/connectionFailed``.
    public convenience init(configuration: RedisConfiguration, label: String = "redis", logger: Logger = Logger.current) throws {
        self.init(unconnected: configuration, label: label, logger: logger)
        _ = try onQueue { try self.connectedContext() }
    }

    /// Creates the connection without connecting: the first call connects. For long-lived
    /// connections of a service that must start even while Redis is down.
    ///
    /// - Parameters:
    ///   - configuration: Server address, password and timeouts.
    ///   - label: Names the connection's dispatch queue and its log metadata.
    ///   - logger: Receives reconnect events.
    public convenience init(lazy configuration: RedisConfiguration, label: String, logger: Logger) {
        self.init(unconnected: configuration, label: label, logger: logger)
    }

    /// Creates the connection without connecting; the first call connects. Used by the pool so
    /// that creating it never blocks an async caller.
    init(unconnected configuration: RedisConfiguration, label: String, logger: Logger) {
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "redis.connection"] = "\(label)"
        self.logger = logger
        self.queue = ConfinedQueue(label: "receiptq.hiredis.\(label)")
    }

    deinit {
        // No other reference exists, so touching the context off the queue is safe here; going
        // through the queue could deadlock if the last reference dies on it.
        if let context { redisFree(context) }
    }

    /// Runs one command and waits for its reply. Blocking: call it from a Dispatch worker thread.
    ///
    /// Arguments go through `redisCommandArgv`, so they are binary-safe and never parsed as a
    /// format string.
    ///
    /// - Parameter arguments: The command name and its arguments, e.g. `["SET", key, value]`.
    /// - Returns: The reply.
    /// - Throws: ``RedisError``: code ``RedisError/Code/server`` for an error reply,
    ///   ``RedisError/Code/io``/``RedisError/Code/timeout`` when the connection broke (the next
    ///   call reconnects), ``RedisError/Code/connectionFailed`` when that reconnect fails.
    public func send(_ arguments: [String]) throws -> RedisValue {
        try send(bytes: arguments.map { Array($0.utf8) })
    }

    /// Runs one command with binary arguments and waits for its reply. Blocking.
    ///
    /// - Parameter arguments: The command name and its arguments as raw bytes.
    /// - Returns: The reply.
    /// - Throws: ``RedisError``, as for ``send(_:)``.
    public func send(bytes arguments: [[UInt8]]) throws -> RedisValue {
        try onQueue { try self.sendOnQueue(arguments) }
    }

    /// Sends several commands in one round trip and returns their replies in order. Blocking.
    ///
    /// Error replies come back as ``RedisValue/error(_:)`` values in their slot instead of
    /// throwing, because the other commands did run.
    ///
    /// - Parameter commands: Each command's name and arguments.
    /// - Returns: One reply per command.
    /// - Throws: ``RedisError`` when the connection fails; then the commands may or may not have run.
    public func pipeline(_ commands: [[String]]) throws -> [RedisValue] {
        try pipeline(bytes: commands.map { $0.map { Array($0.utf8) } })
    }

    /// Sends several commands with binary arguments in one round trip. Blocking.
    ///
    /// - Parameter commands: Each command's name and arguments as raw bytes.
    /// - Returns: One reply per command; error replies are ``RedisValue/error(_:)`` values.
    /// - Throws: ``RedisError`` when the connection fails; then the commands may or may not have run.
    public func pipeline(bytes commands: [[[UInt8]]]) throws -> [RedisValue] {
        try onQueue { try self.pipelineOnQueue(commands) }
    }

    /// Runs one command on the connection's queue without blocking the caller's thread.
    ///
    /// - Parameter arguments: The command name and its arguments.
    /// - Returns: The reply.
    /// - Throws: ``RedisError``, as for ``send(_:)``.
    public func command(_ arguments: [String]) async throws -> RedisValue {
        let encoded = arguments.map { Array($0.utf8) }
        return try await onQueueAsync { try self.sendOnQueue(encoded) }
    }

    /// Pipelines several commands on the connection's queue without blocking the caller's thread.
    ///
    /// - Parameter commands: Each command's name and arguments.
    /// - Returns: One reply per command; error replies are ``RedisValue/error(_:)`` values.
    /// - Throws: ``RedisError`` when the connection fails.
    public func pipelined(_ commands: [[String]]) async throws -> [RedisValue] {
        let encoded = commands.map { $0.map { Array($0.utf8) } }
        return try await onQueueAsync { try self.pipelineOnQueue(encoded) }
    }

    /// Subscribes to `channel` (Redis pub/sub); afterwards use only ``nextMessage(timeout:)`` on this
    /// connection. Blocking. A reconnect (after any error) drops the subscription: call this again.
    ///
    /// - Parameter channel: The channel name.
    /// - Throws: ``RedisError``, as for ``send(_:)``.
    public func subscribe(_ channel: String) throws {
        _ = try send(["SUBSCRIBE", channel])
    }

    /// Waits up to `timeout` for the next message on a subscribed connection. Blocking.
    ///
    /// It waits with `poll(2)` rather than the socket timeout: a hiredis read timeout would leave the
    /// context unusable, and an idle channel is normal here.
    ///
    /// - Parameter timeout: How long to wait.
    /// - Returns: The pushed reply (`["message", channel, payload]`), or nil when nothing came in time.
    /// - Throws: ``RedisError`` when the connection broke (the next call reconnects, unsubscribed).
    public func nextMessage(timeout: Duration) throws -> RedisValue? {
        try onQueue { () throws -> RedisValue? in
            guard !isClosed else { throw RedisError.from(.closed) }
            guard let context else { throw RedisError.from(.invalidArgument("not subscribed")) }
            // A subscription on the old primary would hear nothing more: end it, so the caller
            // subscribes again, on the new one.
            if primarySwitched {
                let error = RedisError.from(.notPrimary("the primary switched"))
                dropForFailover(error)
                throw error
            }
            if let buffered = try bufferedReply(context) { return buffered }
            var descriptor = pollfd(fd: context.pointee.fd, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(max(0, min(Double(Int32.max), timeout / .milliseconds(1))))
            let ready = poll(&descriptor, 1, milliseconds)
            if ready == 0 || (ready < 0 && errno == EINTR) { return nil }
            guard ready > 0, redisBufferRead(context) == REDIS_OK else { throw brokenConnection(context) }
            return try bufferedReply(context)
        }
    }

    /// A reply hiredis already read, if one is complete.
    private func bufferedReply(_ context: UnsafeMutablePointer<redisContext>) throws -> RedisValue? {
        var raw: UnsafeMutableRawPointer?
        guard redisGetReplyFromReader(context, &raw) == REDIS_OK else { throw brokenConnection(context) }
        guard let reply = raw else { return nil }
        defer { freeReplyObject(reply) }
        return Self.convert(reply)
    }

    /// Closes the connection; later calls throw ``RedisError/Code/closed``. Idempotent.
    ///
    /// Waits for a command in flight on this connection to finish first (at most the command
    /// timeout), since hiredis cannot be interrupted from another thread.
    public func close() {
        onQueue {
            isClosed = true
            dropContext()
        }
    }

    /// Runs `body` on the connection's queue and returns its result to an async caller; used by
    /// ``RedisConnectionPool`` so a pooled caller's blocking calls run inline on the queue.
    func run<T: Sendable>(_ body: @Sendable (RedisConnection) throws -> T) async throws -> T {
        // The continuation is resumed only after `body` has run, so it never outlives this call.
        try await withoutActuallyEscaping(body) { body in
            try await onQueueAsync { try body(self) }
        }
    }

    // MARK: - Queue confinement

    private func onQueue<T>(_ body: () throws -> T) rethrows -> T { try queue.sync(body) }

    private func onQueueAsync<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await queue.async(body)
    }

    // MARK: - On-queue implementation

    private func sendOnQueue(_ arguments: [[UInt8]]) throws -> RedisValue {
        guard !arguments.isEmpty else { throw RedisError.from(.invalidArgument("empty command")) }
        let context = try connectedContext()
        let value = try withSIGPIPEBlocked { () throws -> RedisValue in
            let raw = try Self.withArgv(arguments) { argc, argv, lengths in
                redisCommandArgv(context, argc, argv, lengths)
            }
            guard let raw else { throw brokenConnection(context) }
            defer { freeReplyObject(raw) }
            return Self.convert(raw)
        }
        if case .error(let message) = value {
            let error = RedisError.from(.reply(message, arguments: arguments, connecting: false))
            if error.code == .failover { dropForFailover(error) }
            throw error
        }
        return value
    }

    private func pipelineOnQueue(_ commands: [[[UInt8]]]) throws -> [RedisValue] {
        guard !commands.isEmpty else { return [] }
        guard !commands.contains(where: \.isEmpty) else { throw RedisError.from(.invalidArgument("empty command")) }
        let context = try connectedContext()
        return try withSIGPIPEBlocked {
            for arguments in commands {
                // Appending only copies into hiredis's output buffer, so it fails only when out of
                // memory; the commands already buffered would then desynchronise the context.
                let status = try? Self.withArgv(arguments) { argc, argv, lengths in
                    redisAppendCommandArgv(context, argc, argv, lengths)
                }
                guard status == REDIS_OK else { throw brokenConnection(context) }
            }
            var replies: [RedisValue] = []
            replies.reserveCapacity(commands.count)
            var failover: RedisError?
            for arguments in commands {
                var raw: UnsafeMutableRawPointer?
                guard redisGetReply(context, &raw) == REDIS_OK, let reply = raw else {
                    throw brokenConnection(context)
                }
                defer { freeReplyObject(reply) }
                // Error replies are values here, but get the same scrubbing as thrown ones.
                let value = Self.convert(reply)
                if case .error(let message) = value {
                    replies.append(.error(RedisError.scrub(message, arguments: arguments)))
                    if failover == nil, RedisError.isFailoverReply(message) {
                        failover = RedisError.from(.reply(message, arguments: arguments, connecting: false))
                    }
                } else {
                    replies.append(value)
                }
            }
            // Every reply is read, so the context is in step, but its server takes no writes: the
            // pipeline failed as a whole (some commands may have run), as after an I/O error.
            if let failover {
                dropForFailover(failover)
                throw failover
            }
            return replies
        }
    }

    /// Returns the live context, connecting first when there is none: on first use of a pooled
    /// connection, or after a failure freed the previous context. One attempt per call.
    private func connectedContext() throws -> UnsafeMutablePointer<redisContext> {
        guard !isClosed else { throw RedisError.from(.closed) }
        if let context {
            if primarySwitched {
                logger.info("Redis primary switched; connecting to the new one")
                dropContext()
            } else if Self.peerClosed(context) {
                // Found before a command is written to it, so nothing is sent twice: the next
                // command after a Redis restart is not the one that pays for the old socket.
                logger.info("Redis closed this idle connection (a restart or SHUTDOWN); connecting again")
                dropContext()
            } else {
                return context
            }
        }
        let context = try withSIGPIPEBlocked { try connect() }
        self.context = context
        return context
    }

    /// Whether the server closed this connection while it was idle (a restart, `SHUTDOWN`, a
    /// `timeout` of its own): its socket reads end-of-file or an error. One `poll` with no wait,
    /// and one peek only when that says readable; between commands nothing else is readable on a
    /// connection that is not subscribed. A peer that vanished without closing (a stopped or
    /// partitioned server) looks alive here: that one is the command timeout's job.
    private static func peerClosed(_ context: UnsafeMutablePointer<redisContext>) -> Bool {
        let socket = context.pointee.fd
        var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 0) > 0 else { return false }
        var byte: UInt8 = 0
        let peeked = recv(socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        if peeked == 0 { return true }
        return peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR
    }

    /// Whether the sentinels announced a new primary since this connection connected. On `queue`.
    private var primarySwitched: Bool { configuration.sentinel.map { $0.switches != connectedSwitches } ?? false }

    /// A failover reply (or switch): the next call asks the sentinels (or the one address) again.
    private func dropForFailover(_ error: RedisError) {
        logger.info("Redis server is not a writable primary; connecting again on the next call", error: error)
        dropContext()
    }

    private func connect() throws -> UnsafeMutablePointer<redisContext> {
        guard let sentinel = configuration.sentinel else {
            let context = try open(host: configuration.host, port: configuration.port)
            logger.debug("Redis connected", metadata: ["redis.host": "\(configuration.host)", "redis.port": "\(configuration.port)"])
            return context
        }
        // Read before asking: a switch announced while this connects makes the next call ask again.
        let switches = sentinel.switches
        var reasons: [String] = []
        var tried: Set<RedisSentinelConfiguration.Endpoint> = []
        for endpoint in sentinel.sentinels {
            let asking = SentinelQuery.connection(
                to: endpoint, password: sentinel.password, connectTimeout: configuration.connectTimeout,
                commandTimeout: configuration.connectTimeout, logger: logger)
            defer { asking.close() }
            let primary: RedisSentinelConfiguration.Endpoint
            do {
                guard let named = try SentinelQuery.primary(on: asking, masterName: sentinel.masterName) else {
                    reasons.append("\(endpoint): does not monitor \(sentinel.masterName)")
                    continue
                }
                primary = named
            } catch {
                reasons.append("\(endpoint): \((error as? RedisError)?.message ?? "\(error)")")
                continue
            }
            // Sentinels agree more often than not: a server that failed once in this attempt (a
            // stopped primary costs a whole connect timeout) is not tried again.
            guard !tried.contains(primary) else { continue }
            tried.insert(primary)
            let context: UnsafeMutablePointer<redisContext>
            do {
                context = try open(host: primary.host, port: primary.port) { context in
                    // A sentinel that has not heard of a failover yet names the old primary, which
                    // may be back as a replica: only a server that says it is the primary will do.
                    let role = try Self.commandOnContext(context, ["ROLE"])
                    guard case .array(let parts) = role, parts.first?.string == "master" else {
                        throw RedisError.from(.notPrimary("not the primary"))
                    }
                }
            } catch {
                reasons.append("\(primary) from \(endpoint): \((error as? RedisError)?.message ?? "\(error)")")
                continue
            }
            connectedSwitches = switches
            sentinel.topology.found(primary)
            logger.debug("Redis connected", metadata: ["redis.primary": "\(primary)", "redis.sentinel": "\(endpoint)"])
            return context
        }
        throw RedisError.from(.invalidConfiguration("no primary for \(sentinel.masterName): \(reasons.joined(separator: "; "))"))
    }

    /// One command on a context that is not stored yet (connecting); error replies are values.
    private static func commandOnContext(_ context: UnsafeMutablePointer<redisContext>, _ arguments: [[UInt8]]) throws -> RedisValue {
        let raw = try withArgv(arguments) { argc, argv, lengths in redisCommandArgv(context, argc, argv, lengths) }
        guard let raw else { throw RedisError.from(.context(context, errno: errno, connecting: true)) }
        defer { freeReplyObject(raw) }
        return convert(raw)
    }

    private static func commandOnContext(_ context: UnsafeMutablePointer<redisContext>, _ arguments: [String]) throws -> RedisValue {
        try commandOnContext(context, arguments.map { Array($0.utf8) })
    }

    /// Connects to one server, sets keepalive and timeouts, sends `AUTH` and runs `check`; the
    /// handshake has the connect timeout, the commands after it the command timeout.
    private func open(
        host: String, port: Int, check: (UnsafeMutablePointer<redisContext>) throws -> Void = { _ in }
    ) throws -> UnsafeMutablePointer<redisContext> {
        guard let port = Int32(exactly: port), (1...65535).contains(port) else {
            throw RedisError.from(.invalidConfiguration("invalid port \(port)"))
        }
        let connected = host.withCString { host in
            // hiredis polls with a zero timeout as "give up at once", not "no timeout".
            configuration.connectTimeout > .zero
                ? redisConnectWithTimeout(host, port, Self.makeTimeval(configuration.connectTimeout))
                : redisConnect(host, port)
        }
        guard let context = connected else { throw RedisError.from(.allocation) }
        // Every failure below must free the context: it is not stored until the end.
        do {
            guard context.pointee.err == 0 else {
                throw RedisError.from(.context(context, errno: errno, connecting: true))
            }
            // Without keepalive a silently dropped peer (NAT, failover) blocks a BLMOVE forever.
            // A server that accepts but does not answer (stopped, partitioned) fails the handshake
            // within the connect timeout, not a command's.
            let handshake = configuration.connectTimeout > .zero ? configuration.connectTimeout : (configuration.commandTimeout ?? .zero)
            guard redisEnableKeepAlive(context) == REDIS_OK, redisSetTimeout(context, Self.makeTimeval(handshake)) == REDIS_OK else {
                throw RedisError.from(.context(context, errno: errno, connecting: true))
            }
            if let password = configuration.password {
                let arguments = [Array("AUTH".utf8), Array(password.utf8)]
                if case .error(let message) = try Self.commandOnContext(context, arguments) {
                    throw RedisError.from(.reply(message, arguments: arguments, connecting: true))
                }
            }
            try check(context)
            guard redisSetTimeout(context, Self.makeTimeval(configuration.commandTimeout ?? .zero)) == REDIS_OK else {
                throw RedisError.from(.context(context, errno: errno, connecting: true))
            }
            return context
        } catch {
            redisFree(context)
            throw error
        }
    }

    /// Maps the context's error, then frees the context: after any hiredis I/O, timeout or
    /// protocol error the context must not be reused, and a late reply would desynchronise it.
    private func brokenConnection(_ context: UnsafeMutablePointer<redisContext>) -> RedisError {
        let savedErrno = errno
        let error =
            context.pointee.err == 0
            ? RedisError.from(.allocation)
            : RedisError.from(.context(context, errno: savedErrno, connecting: false))
        logger.info("Redis connection dropped; reconnecting on the next call", error: error)
        dropContext()
        return error
    }

    private func dropContext() {
        if let context { redisFree(context) }
        context = nil
    }
}
