/// How long a client may take over each part of an HTTP/1.1 exchange, and how many connections a
/// listener holds at once. Without them a client that sends nothing, or a byte a second, holds a
/// file descriptor for as long as it likes (issue 41: 200 slowloris sockets held for minutes).
///
/// ```swift
/// let limits = ConnectionLimits(
///     headerTimeout: .seconds(10), bodyTimeout: .seconds(20), bodyMinimumBytesPerSecond: 500,
///     idleTimeout: .seconds(75), maxConnections: 1000)
/// ```
public struct ConnectionLimits: Sendable, Equatable {
    /// From accepting a connection, or from the first byte of a later request, until its request
    /// head (request line and headers) is whole.
    public var headerTimeout: Duration
    /// From the request head until its body is whole, extended by one second for every
    /// ``bodyMinimumBytesPerSecond`` bytes received: a large body sent steadily is never cut, a body
    /// trickled slower than the rate (or stalled) is.
    public var bodyTimeout: Duration
    /// The body rate that keeps a body's deadline moving (0: the whole body within ``bodyTimeout``).
    public var bodyMinimumBytesPerSecond: Int
    /// How long a kept-alive connection may wait for its next request once a response is written.
    public var idleTimeout: Duration
    /// Connections the listener holds at once; one more is closed as soon as it is accepted.
    public var maxConnections: Int

    /// Creates the limits.
    /// - Parameters:
    ///   - headerTimeout: the request head's time.
    ///   - bodyTimeout: the body's time before its bytes extend it.
    ///   - bodyMinimumBytesPerSecond: bytes that buy the body one more second (0: none).
    ///   - idleTimeout: the wait for a kept-alive connection's next request.
    ///   - maxConnections: connections held at once.
    public init(headerTimeout: Duration, bodyTimeout: Duration, bodyMinimumBytesPerSecond: Int, idleTimeout: Duration, maxConnections: Int) {
        self.headerTimeout = headerTimeout
        self.bodyTimeout = bodyTimeout
        self.bodyMinimumBytesPerSecond = bodyMinimumBytesPerSecond
        self.idleTimeout = idleTimeout
        self.maxConnections = maxConnections
    }
}
