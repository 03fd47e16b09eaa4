import Foundation

/// The reverse proxies whose forwarding header is believed, and the client address a request
/// came from.
///
/// A forwarding header (`X-Forwarded-For` by default) is anyone's to write, so it is read only
/// when the peer is a trusted proxy, and then from the right: each trusted proxy appends the
/// address it saw, so the right-most entry that is not itself a trusted proxy is the client. An
/// attacker who writes the header can only add entries to its left, which are never read. Taking
/// the left-most entry, or believing any peer, would let one client be every address, and so
/// dodge the per-address throttle and blame others.
public struct TrustedProxies: Sendable, Equatable {
    /// A network in CIDR notation (`10.0.0.0/8`, `::1/128`; a bare address is its own /32 or /128).
    public struct Network: Sendable, Equatable, CustomStringConvertible {
        let address: [UInt8]
        let prefixLength: Int

        /// Parses `10.0.0.0/8`, `fd00::/8` or a bare address; nil when it is neither.
        public init?(_ text: some StringProtocol) {
            let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard let address = TrustedProxies.bytes(of: String(parts[0])) else { return nil }
            let length: Int
            if parts.count == 2 {
                guard let value = Int(parts[1]), value >= 0, value <= address.count * 8, parts[1].allSatisfy(\.isASCII) else { return nil }
                length = value
            } else {
                length = address.count * 8
            }
            self.address = address
            self.prefixLength = length
        }

        /// Whether `bytes` (4 or 16) lies in this network.
        func contains(_ bytes: [UInt8]) -> Bool {
            guard bytes.count == address.count else { return false }
            var remaining = prefixLength
            for (index, byte) in address.enumerated() where remaining > 0 {
                let bits = min(8, remaining)
                let mask: UInt8 = bits == 8 ? 0xFF : ~(0xFF >> UInt8(bits))
                if byte & mask != bytes[index] & mask { return false }
                remaining -= bits
            }
            return true
        }

        public var description: String {
            let text = TrustedProxies.text(of: address) ?? "?"
            return "\(text)/\(prefixLength)"
        }
    }

    /// The header the proxies write (nil: none is read, the peer is the client).
    public var header: String?
    /// The proxies believed.
    public var networks: [Network]

    /// Loopback and the private ranges: where a deployment's own proxies live, and where no
    /// client from the internet can connect from.
    public static let privateNetworks: [Network] = [
        "127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7",
    ].compactMap { Network($0) }

    /// Creates the rule: `header` believed from `networks`.
    public init(header: String?, networks: [Network] = TrustedProxies.privateNetworks) {
        self.header = header
        self.networks = networks
    }

    /// An entry of a list that is neither an address nor a CIDR network.
    public struct NotANetwork: Error, Equatable {
        /// The entry, as written.
        public var entry: String

        /// Creates the error for `entry`.
        public init(entry: String) { self.entry = entry }
    }

    /// Parses a comma-separated list of networks; the failure names the first entry that is not one.
    public static func parse(_ list: String) -> Result<[Network], NotANetwork> {
        var networks: [Network] = []
        for entry in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            guard let network = Network(entry) else { return .failure(NotANetwork(entry: entry)) }
            networks.append(network)
        }
        return .success(networks)
    }

    /// The client's address: the peer, or when the peer is a trusted proxy, the right-most entry
    /// of `forwarded` (the header's values) that is not a trusted proxy.
    public func client(peer: String?, forwarded: String?) -> String? {
        guard header != nil, let peer, let forwarded, isTrusted(peer) else { return peer }
        var client = peer
        for entry in forwarded.split(separator: ",").reversed() {
            let candidate = entry.trimmingCharacters(in: .whitespaces)
            guard Self.bytes(of: candidate) != nil else { break }  // junk ends the chain of proxies
            client = candidate
            if !isTrusted(candidate) { break }
        }
        return client
    }

    /// Whether `address` is one of the trusted proxies.
    public func isTrusted(_ address: String) -> Bool {
        guard let bytes = Self.bytes(of: address) else { return false }
        return networks.contains { $0.contains(bytes) }
    }

    /// An IPv4 (4 bytes) or IPv6 (16 bytes) address's bytes; an IPv4-mapped IPv6 address is its
    /// IPv4 address.
    static func bytes(of text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF { return Array(bytes[12...]) }
        return bytes
    }

    static func text(of bytes: [UInt8]) -> String? {
        var buffer = [CChar](repeating: 0, count: 64)
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        let ok = bytes.withUnsafeBytes { raw in inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count)) != nil }
        return ok ? String(cString: buffer) : nil
    }
}
