import Hummingbird
import NIOCore

/// The ingestion API's request context: Hummingbird's core storage plus the peer address, which
/// becomes the receipt's `ip_address` when the client does not send one.
public struct IngestRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }
}
