internal import CHiredis

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The byte-level side of RedisConnection: argv for hiredis, reply trees into RedisValue, timeouts,
// and the SIGPIPE guard around every write.
extension RedisConnection {
    /// Lays all arguments out in one buffer and calls `body` with hiredis's argv/argvlen arrays.
    /// The pointers are valid only inside `body`; hiredis copies them into its output buffer.
    static func withArgv<R>(
        _ arguments: [[UInt8]],
        _ body: (Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>, UnsafePointer<Int>) throws -> R
    ) throws -> R {
        guard let argc = Int32(exactly: arguments.count) else { throw RedisError.from(.invalidArgument("too many arguments")) }
        var storage: [UInt8] = []
        storage.reserveCapacity(arguments.reduce(1) { $0 + $1.count })
        var offsets: [Int] = []
        var lengths: [Int] = []
        for argument in arguments {
            offsets.append(storage.count)
            lengths.append(argument.count)
            storage += argument
        }
        // Keeps the buffer non-empty, so it has a base address even if every argument is empty.
        storage.append(0)
        return try storage.withUnsafeBufferPointer { bytes in
            try bytes.withMemoryRebound(to: CChar.self) { chars in
                guard let base = chars.baseAddress else { throw RedisError.from(.allocation) }
                var argv: [UnsafePointer<CChar>?] = offsets.map { UnsafePointer(base + $0) }
                return try argv.withUnsafeMutableBufferPointer { argvBuffer in
                    try lengths.withUnsafeBufferPointer { lengthBuffer in
                        guard let argvBase = argvBuffer.baseAddress, let lengthBase = lengthBuffer.baseAddress else {
                            throw RedisError.from(.invalidArgument("empty command"))
                        }
                        return try body(argc, argvBase, lengthBase)
                    }
                }
            }
        }
    }

    /// Copies a hiredis reply tree into a ``RedisValue``; the caller frees the tree.
    static func convert(_ raw: UnsafeMutableRawPointer) -> RedisValue {
        let reply = raw.assumingMemoryBound(to: redisReply.self).pointee
        switch reply.type {
        case REDIS_REPLY_STRING:
            return .bulk(bytes(reply.str, count: reply.len))
        case REDIS_REPLY_STATUS:
            return .status(String(decoding: bytes(reply.str, count: reply.len), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            return .error(String(decoding: bytes(reply.str, count: reply.len), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            return .integer(Int(truncatingIfNeeded: reply.integer))
        case REDIS_REPLY_ARRAY:
            guard let elements = reply.element else { return .array([]) }
            return .array(
                (0..<reply.elements).map { index in
                    elements[index].map { convert(UnsafeMutableRawPointer($0)) } ?? .null
                })
        default:
            // REDIS_REPLY_NIL, and any type a future hiredis might add.
            return .null
        }
    }

    static func bytes(_ pointer: UnsafeMutablePointer<CChar>?, count: Int) -> [UInt8] {
        guard let pointer, count > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    static func makeTimeval(_ duration: Duration) -> timeval {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0, seconds > 0 || attoseconds > 0 else { return timeval(tv_sec: 0, tv_usec: 0) }
        // Round up, so a positive timeout never becomes 0, which the kernel reads as "no timeout".
        var wholeSeconds = seconds
        var microseconds = (attoseconds + 999_999_999_999) / 1_000_000_000_000
        if microseconds == 1_000_000 {
            wholeSeconds += 1
            microseconds = 0
        }
        return timeval(tv_sec: Int(wholeSeconds), tv_usec: Int(microseconds))
    }
}

/// Runs `body` with SIGPIPE blocked on this thread and discards a SIGPIPE it raised.
///
/// hiredis 0.14 writes with `write(2)`, not `send(MSG_NOSIGNAL)`, so writing to a socket the
/// server has already reset raises SIGPIPE, whose default action kills the whole process. This
/// keeps the fix local to the connection's thread instead of ignoring SIGPIPE process-wide; the
/// write still fails with EPIPE, which hiredis reports as an I/O error.
func withSIGPIPEBlocked<T>(_ body: () throws -> T) rethrows -> T {
    #if canImport(Glibc)
    var pipeSignal = sigset_t()
    sigemptyset(&pipeSignal)
    sigaddset(&pipeSignal, SIGPIPE)
    var previous = sigset_t()
    pthread_sigmask(SIG_BLOCK, &pipeSignal, &previous)
    defer {
        // A SIGPIPE that was already blocked belongs to whoever blocked it; leave it pending.
        var pending = sigset_t()
        if sigismember(&previous, SIGPIPE) == 0, sigpending(&pending) == 0, sigismember(&pending, SIGPIPE) == 1 {
            var noWait = timespec(tv_sec: 0, tv_nsec: 0)
            _ = sigtimedwait(&pipeSignal, nil, &noWait)
        }
        pthread_sigmask(SIG_SETMASK, &previous, nil)
    }
    #endif
    return try body()
}
