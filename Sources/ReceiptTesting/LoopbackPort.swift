import Foundation

/// A free TCP port on 127.0.0.1: the kernel's pick for a socket bound to port 0, closed again.
/// Free when this returns and almost surely still free a moment later; nobody listens on it.
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EMFILE) }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
            bind(fd, address, length) == 0 && getsockname(fd, address, &length) == 0
        }
    }
    guard bound else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EADDRINUSE) }
    return Int(UInt16(bigEndian: address.sin_port))
}
