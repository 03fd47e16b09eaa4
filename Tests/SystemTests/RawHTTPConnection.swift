import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A client connection spoken to byte by byte, as a hostile client would: a head sent without its
/// body, a byte at a time, or nothing at all. Blocking calls: use it from `.blockingWork` suites.
final class RawHTTPConnection {
    /// One response as read off the socket.
    struct Response {
        var status: Int
        /// Header names lower-cased.
        var headers: [String: String]
        var body: [UInt8]
    }

    private let descriptor: Int32
    /// Bytes read and not yet taken by a response.
    private var pending: [UInt8] = []

    /// Connects to 127.0.0.1:`port`.
    init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EMFILE) }
        // A bound on a server that never answers, so a broken test fails instead of hanging; no
        // test waits for it.
        var bound = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &bound, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            close(descriptor)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .ECONNREFUSED)
        }
    }

    deinit { close(descriptor) }

    /// Sends `text`; false once the server has closed the connection.
    @discardableResult
    func send(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// The next response (status line, headers, a `Content-Length` body); nil when the connection
    /// ends before one is whole.
    func readResponse() -> Response? {
        while true {
            if let end = headEnd() {
                let head = String(decoding: pending[..<end], as: UTF8.self).components(separatedBy: "\r\n")
                let statusParts = head[0].split(separator: " ")
                guard statusParts.count >= 2, let status = Int(statusParts[1]) else { return nil }
                var headers: [String: String] = [:]
                for line in head.dropFirst() {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                let length = headers["content-length"].flatMap(Int.init) ?? 0
                while pending.count < end + 4 + length {
                    guard receive() else { return nil }
                }
                let body = Array(pending[(end + 4)..<(end + 4 + length)])
                pending.removeFirst(end + 4 + length)
                return Response(status: status, headers: headers, body: body)
            }
            guard receive() else { return nil }
        }
    }

    /// Whether the server has closed the connection (reset or end of stream); reads what it sent
    /// before (a 408) into ``unread`` without waiting for more.
    func isClosedByServer() -> Bool {
        while true {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 {
                pending += buffer[..<count]
                continue
            }
            if count == 0 { return true }
            return errno != EAGAIN && errno != EWOULDBLOCK
        }
    }

    /// What the server sent that no response read took.
    var unread: String { String(decoding: pending, as: UTF8.self) }

    private func headEnd() -> Int? {
        guard pending.count >= 4 else { return nil }
        for index in 0...(pending.count - 4)
        where pending[index] == 13 && pending[index + 1] == 10 && pending[index + 2] == 13 && pending[index + 3] == 10 {
            return index
        }
        return nil
    }

    /// Waits for bytes; false at the end of the stream or on an error.
    private func receive() -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        guard count > 0 else { return false }
        pending += buffer[..<count]
        return true
    }
}
