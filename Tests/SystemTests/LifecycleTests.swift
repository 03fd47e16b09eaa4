import DevTools
import Foundation
import Libpq
import Logging
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// A graceful stop ends everything the roles started: every long-running part runs in the service
/// group, its threads start in `run()`, and the HTTP clients' threads end and their connections
/// close when it stops.
@Suite("Lifecycle: a stopped system leaves nothing running", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct LifecycleTests {
    @Test("Every role started, used and stopped gracefully: no receiptq.* thread is left, no socket to the mock App Store or the webhook receiver")
    func stopLeavesNoThreadOrSocket() async {
        // In a process of its own (an exit test): the suites running alongside start and stop
        // receiptq threads and sockets of their own, which this process's /proc would show too.
        // The child says what failed in `lifecycle:` lines on stderr and still exits normally:
        // a failed exit test hands back no output, and an issue the child records arrives here
        // without its message.
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            do {
                try await LifecycleTests.startUseAndStop()
            } catch {
                if !(error is LifecycleFailure) { FileHandle.standardError.write(Data("lifecycle: \(error)\n".utf8)) }
            }
        }
        let said = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("lifecycle:") }
        if !said.isEmpty { Issue.record(Comment(rawValue: said.joined(separator: "\n"))) }
    }

    /// A check of the child process: on failure it says why on stderr and throws, ending the run.
    static func check(_ condition: Bool, _ message: @autoclosure () -> String) throws {
        guard !condition else { return }
        FileHandle.standardError.write(Data("lifecycle: \(message())\n".utf8))
        throw LifecycleFailure()
    }

    struct LifecycleFailure: Error {}

    /// The threads the roles name (`receiptq.verify`, `receiptq.fetch`, …), by thread id.
    static func receiptqThreads() -> [String: String] {
        var threads: [String: String] = [:]
        for id in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            // A thread that ended since the listing has no comm to read.
            guard let comm = try? String(contentsOfFile: "/proc/self/task/\(id)/comm", encoding: .utf8) else { continue }
            let name = comm.trimmingCharacters(in: .whitespacesAndNewlines)
            if name.hasPrefix("receiptq.") { threads[id] = name }
        }
        return threads
    }

    /// How many of this process's descriptors are TCP sockets whose far end is one of `ports`: in
    /// any state, so a connection the server has closed and we have not (CLOSE_WAIT) counts too.
    static func sockets(to ports: Set<Int>) -> Int {
        var inodes: Set<Substring> = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let text = readWhole(table)
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 9, let port = fields[2].split(separator: ":").last.flatMap({ Int($0, radix: 16) }), ports.contains(port)
                else { continue }
                inodes.insert(fields[9])
            }
        }
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return descriptors.count { descriptor in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)"),
                target.hasPrefix("socket:[")
            else { return false }
            return inodes.contains(target.dropFirst(8).dropLast())
        }
    }

    /// A /proc file read to its end: they report a size of 0, and Foundation's whole-file reads
    /// stop at the first page of a table longer than that.
    static func readWhole(_ path: String) -> String {
        let file = open(path, O_RDONLY)
        guard file >= 0 else { return "" }
        defer { close(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(file, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            bytes += chunk.prefix(count)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Runs in the exit test's process: starts every role (API, worker, scheduler, webhook
    /// dispatcher, notification history sweep), makes each HTTP client connect, stops the system
    /// gracefully and looks for what is left.
    static func startUseAndStop() async throws {
        let before = receiptqThreads()
        let system = try await TestSystem.start(notificationSweep: true)
        var quiet = Logger(label: "lifecycle-receiver")
        quiet.logLevel = .critical
        let receiver = WebhookReceiver(secret: "pending")
        let (url, receiverTask) = try await receiver.start(logger: quiet)
        defer { receiverTask.cancel() }
        let connection = try system.postgres()
        let (_, secret) = try WebhookAdmin(connection: connection, secrets: try SecretBox(key: TestSystem.secretsKey)).add(
            appID: system.app.id, url: url, eventTypes: [], allowPrivate: true, audit: .test("webhook.add"))
        connection.close()
        receiver.setSecret(secret)

        // verifyReceipt, the App Store Server API and a webhook, each through its own client.
        let (receipt, _) = try system.forgeReceipt()
        let (receiptStatus, _) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        try check(receiptStatus == 200, "POST receipt answered \(receiptStatus)")
        let (jws, _) = try system.signedTransaction()
        let (transactionStatus, _) = try await system.post(#"{"signed_transaction":"\#(jws)"}"#, path: "/client/transactions")
        try check(transactionStatus == 200, "POST transaction answered \(transactionStatus)")
        try check(try await eventually { receiver.accepted > 0 }, "no webhook delivery arrived")
        try check(
            try await eventually { system.mock.state.serverAPI.calls("sandbox notification_history") > 0 }, "the sweep never asked the mock")

        // While running, the clients hold threads and kept-alive connections: what the stop must end.
        let mockPort = system.mock.port
        let receiverPort = try #require(URLComponents(string: url)?.port)
        let started = Set(receiptqThreads().filter { before[$0.key] == nil }.values)
        let expected: Set = [
            "receiptq.verify", "receiptq.srvapi", "receiptq.hooks", "receiptq.fetch", "receiptq.commit", "receiptq.sched",
            "receiptq.outbox", "receiptq.intake",
        ]
        try check(started.isSuperset(of: expected), "threads while running: \(started.sorted())")
        try check(sockets(to: [mockPort]) > 0, "no connection to the mock while running")
        try check(sockets(to: [receiverPort]) > 0, "no connection to the webhook receiver while running")

        await system.stop()
        try check(
            try await eventually { receiptqThreads().keys.allSatisfy { before[$0] != nil } },
            "left running: \(receiptqThreads().filter { before[$0.key] == nil }.values.sorted())")
        try check(
            try await eventually { sockets(to: [mockPort, receiverPort]) == 0 },
            "open to the mock: \(sockets(to: [mockPort])), to the receiver: \(sockets(to: [receiverPort]))")
    }
}
