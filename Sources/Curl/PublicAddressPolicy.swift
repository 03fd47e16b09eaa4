internal import CCurl

#if canImport(Glibc)
import Glibc
#endif

/// Which addresses a URL a customer chose may reach: public unicast only. Loopback, private
/// (RFC 1918, unique local), link-local (cloud metadata services live there), carrier-grade NAT,
/// multicast, reserved and documentation ranges are refused, so a webhook URL cannot be aimed at
/// the deployment's own network.
public enum PublicAddressPolicy {
    /// Whether `address` (4 bytes IPv4, 16 bytes IPv6, network order) is a public unicast address.
    public static func isPublic(_ address: [UInt8]) -> Bool {
        switch address.count {
        case 4: return isPublicIPv4(address)
        case 16: return isPublicIPv6(address)
        default: return false
        }
    }

    private static func isPublicIPv4(_ a: [UInt8]) -> Bool {
        switch (a[0], a[1]) {
        case (0, _), (10, _), (127, _): return false
        case (100, 64...127): return false  // carrier-grade NAT
        case (169, 254): return false  // link-local, metadata services
        case (172, 16...31), (192, 168): return false
        case (192, 0) where a[2] == 0 || a[2] == 2: return false  // IETF protocol assignments, TEST-NET-1
        case (198, 18...19): return false  // benchmarking
        case (198, 51) where a[2] == 100, (203, 0) where a[2] == 113: return false  // TEST-NET-2/3
        case (224...255, _): return false  // multicast, reserved, broadcast
        default: return true
        }
    }

    private static func isPublicIPv6(_ a: [UInt8]) -> Bool {
        // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d): judged by the IPv4 address inside.
        if a[0..<10].allSatisfy({ $0 == 0 }) && a[10] == 0xFF && a[11] == 0xFF { return isPublicIPv4(Array(a[12..<16])) }
        if a[0..<12] == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0][...] { return isPublicIPv4(Array(a[12..<16])) }
        if a[0..<15].allSatisfy({ $0 == 0 }) { return false }  // :: and ::1
        if a[0] & 0xFE == 0xFC { return false }  // unique local fc00::/7
        if a[0] == 0xFE && a[1] & 0xC0 == 0x80 { return false }  // link-local fe80::/10
        if a[0] == 0xFF { return false }  // multicast
        if a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0D && a[3] == 0xB8 { return false }  // documentation
        // Only global unicast (2000::/3) is public.
        return a[0] & 0xE0 == 0x20
    }

    /// Whether `host` resolves, and only to addresses that are not public: the early, clear refusal
    /// of an endpoint (each connection is checked again, since a DNS answer may change). Blocks on
    /// the resolver: not for an event loop or a libcurl engine thread.
    ///
    /// `localhost` and every name under it are loopback by definition (RFC 6761 § 6.3), whatever
    /// the resolver says, with or without the root's trailing dot: `localhost.` and
    /// `foo.localhost` often do not resolve at registration and would pass as "not private".
    public static func resolvesOnlyPrivately(_ host: String) -> Bool {
        if isLoopbackName(host) { return true }
        let addresses = resolve(host)
        return !addresses.isEmpty && !addresses.contains(where: isPublic)
    }

    /// Whether `host` is `localhost` or a name under it, in any case, with or without a final dot.
    public static func isLoopbackName(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        return name == "localhost" || name.hasSuffix(".localhost")
    }

    /// The addresses `host` resolves to (an IP literal resolves to itself), for checking a URL when
    /// it is registered; empty when it does not resolve.
    public static func resolve(_ host: String) -> [[UInt8]] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let trimmed = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard getaddrinfo(trimmed, nil, &hints, &result) == 0, let first = result else { return [] }
        defer { freeaddrinfo(result) }
        var addresses: [[UInt8]] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if let address = entry.pointee.ai_addr {
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { pointer in
                        addresses.append(withUnsafeBytes(of: pointer.pointee.sin_addr) { Array($0) })
                    }
                case AF_INET6:
                    address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                        addresses.append(withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) })
                    }
                default: break
                }
            }
            cursor = entry.pointee.ai_next
        }
        return addresses
    }
}
