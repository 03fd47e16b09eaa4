import Foundation
import ReceiptTesting

/// A loopback test server written in Python, started per test: it prints its port on the first
/// line and exits when its stdin closes (so a crashed test leaves no server behind).
final class PythonServer: Sendable {
    let port: Int
    private let process: ChildProcess

    /// Writes `script` to a temporary file and runs it with `arguments`.
    init(script: String, arguments: [String] = []) throws {
        let scriptURL = FileManager.default.temporaryDirectory
            .appendingPathComponent("receiptq-loopback-\(UUID().uuidString).py")
        try script.write(to: scriptURL, atomically: true, encoding: .utf8)
        let process = try ChildProcess(["python3", scriptURL.path] + arguments, stdin: .pipe, stdout: .pipe, stderr: .file("/dev/null"))
        var line = Data()
        while let byte = try process.output?.read(upToCount: 1), let first = byte.first, first != 0x0A {
            line.append(first)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            process.terminate()
            process.waitUntilExit()
            throw CocoaError(.fileReadCorruptFile)
        }
        self.port = port
        self.process = process
    }

    deinit {
        try? process.input?.close()
        process.terminate()
        process.waitUntilExit()
    }

    /// `http://127.0.0.1:<port><path>` (or `https://localhost:<port><path>` for TLS servers).
    func url(_ path: String, tls: Bool = false) -> String {
        tls ? "https://localhost:\(port)\(path)" : "http://127.0.0.1:\(port)\(path)"
    }
}
