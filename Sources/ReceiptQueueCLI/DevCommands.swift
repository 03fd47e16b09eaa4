import ArgumentParser
import Conformance
import DevTools
import Foundation
import MockAppStore
import ReceiptCore
import ReceiptQueueApp

// The executable's one file that links the tools (DevTools, MockAppStore, Conformance), for the dev
// subcommands only: `forge`, `mock-appstore`, `all`'s in-process mock App Store and demo, and
// `conformance`. ReceiptQueueApp
// cannot offer them, since no production library may link the tools; everything else of the
// executable reaches the project through ReceiptQueueApp alone.

struct MockAppStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-appstore", abstract: "Runs the mock App Store (verifyReceipt and the Server API) for development and benchmarks.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on.") var port = 9090
    @Option(help: "Latency added to every answer, in milliseconds.") var latencyMs = 0
    @Option(help: "Directory of the mock Apple JWS chain the Server API signs with (created on first use; default: a new chain per run).")
    var jwsCaDirectory: String?
    @Flag(help: "Answer every unknown numeric transaction id in production as a monthly subscription (load tests).")
    var synthesizeTransactions = false

    func run() async throws {
        let logger = try ReceiptQueueApp.Runtime.bootstrap(label: "mock-appstore").logger
        let authority = try jwsCaDirectory.map { try MockAppleJWSAuthority.loadOrCreate(directory: URL(fileURLWithPath: $0)) }
        let state = MockAppStoreState(baseDelay: .milliseconds(latencyMs), authority: authority)
        state.serverAPI.synthesizesUnknownTransactions = synthesizeTransactions
        try await ReceiptQueueApp.run(
            [MockAppStore.application(host: host, port: port, state: state, logger: logger)], logger: logger)
    }
}

struct ConformanceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "conformance",
        abstract: "Plays simulated customers' App Store lifecycles through a whole deployment in process and checks every answer.",
        discussion: """
            Runs every role (API, workers, scheduler, history sweep) in this process on a simulated clock, with the \
            mock App Store notifying it and a webhook receiver as the customers' backend, then prints a table per \
            scenario: answers checked, wrong, late, events expected, missing, duplicated, out of order, unexpected. \
            It needs Redis and Postgres, read as `receiptq all` reads them (REDIS_*, POSTGRES_*), and creates a \
            database of its own on that server (receiptq_conformance_<id>) and a Redis key prefix of its own, both \
            removed at the end. --seed reproduces a run's timelines and faults. Under --faults killed (and all) one \
            worker runs as a process of its own, this executable's hidden conformance-worker command on the run's \
            clock, SIGKILLed once a simulated month while it holds jobs and started again.

            Exit status: 0 when the run is conformant; 1 when an answer was still wrong once the deployment had heard \
            from Apple, or an event was missing or duplicated (late answers and events out of order are counted, \
            not failed); 64 for bad arguments.
            """)

    @Option(help: "Customers to simulate (scenarios are dealt round-robin).") var customers = 1_000
    @Option(help: "Simulated days.") var days = 365
    @Option(
        help: ArgumentHelp(
            "Apple's faults: none, default (duplicated, delayed, reordered and lost notifications), all (and Server API errors, "
                + "an hour's outage, a worker process killed), or one alone: lost, outage, killed.")
    )
    var faults: Faults.Preset = .default
    @Option(help: "The run's seed (default: a new one, printed).") var seed = UInt64.random(in: 1...999_999)
    @Option(help: "Also write the run's counts and times to this file, as JSON (the bench row reads it).") var json: String?
    @Flag(
        help: ArgumentHelp(
            "The app has no notification URL: Apple's changes reach the deployment only by its re-polls and devices' posts "
                + "(a customer's wrong answer is late until it asked Apple since; faults: none or killed)."))
    var noNotifications = false
    @Flag(help: "Print each disagreement as it is found, and all of them with their customers' timelines at the end.")
    var verbose = false

    func validate() throws {
        do {
            try ConformanceRun(customers: customers, days: days, faults: Faults(faults), seed: seed, notifications: !noNotifications).validate()
        } catch let error as ConformanceRun.InvalidArgument {
            throw ValidationError(error.description)
        }
    }

    func run() async throws {
        let runtime = try ReceiptQueueApp.Runtime.bootstrap(label: "conformance")
        let logger = ConformanceRun.rolesLogger(runtime.logger, verbose: verbose)
        let outcome = try await ConformanceRun(
            customers: customers, days: days, faults: Faults(faults), seed: seed, notifications: !noNotifications
        ).play(
            environment: ProcessInfo.processInfo.environment, logger: logger,
            log: { [verbose] line in if verbose { FileHandle.standardError.write(Data((line + "\n").utf8)) } })
        print(outcome.summary(verbose: verbose))
        if let json { try Data((outcome.json.encodedText + "\n").utf8).write(to: URL(fileURLWithPath: json)) }
        if !outcome.conformant { throw ExitCode(1) }
    }
}

extension Faults.Preset: ExpressibleByArgument {}

/// `receiptq conformance-worker`: the worker process a run under `--faults killed` starts, kills
/// and starts again; hidden (not for people). A command of its own, not a subcommand of
/// `conformance`: a subcommand, even hidden, would make that command's usage ask for one.
struct ConformanceWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "conformance-worker", abstract: "Runs one worker on a conformance run's simulated clock (started by the run itself).",
        shouldDisplay: false)

    @Option(help: "The file the run publishes its simulated time in.") var clockFile: String

    func run() async throws {
        let runtime = try ReceiptQueueApp.Runtime.bootstrap(label: "conformance-worker")
        try await ConformanceWorker.run(clockFile: clockFile, configuration: runtime.configuration, logger: runtime.logger)
    }
}

struct Forge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Writes a unified receipt in Apple's format, signed by a local test CA (never Apple's).",
        discussion: """
            With --signed-transaction it writes a StoreKit 2 signed transaction instead (a compact JWS, for \
            POST /client/transactions), signed by the mock's Apple-shaped chain in --jws-ca-directory: the first \
            --product, in --environment Sandbox or Production. --register URL adds it to a running mock App Store's \
            Server API ledger (e.g. http://127.0.0.1:9090).
            """)

    @Option(help: "Bundle id of the receipt.") var bundleId: String
    @Option(help: "Receipt environment: Production, ProductionSandbox or Xcode.") var environment = "ProductionSandbox"
    @Option(
        name: .customLong("product"),
        help: "A purchase: PRODUCT_ID, or PRODUCT_ID:DAYS for a subscription expiring DAYS from now (negative = expired). Repeatable.")
    var products: [String] = []
    @Option(help: "Mock App Store directives carried in the receipt, e.g. status=21005,delay_ms=50.") var mock: String?
    @Option(help: "Directory of the test CA (created on first use).") var caDirectory = ".local/demo/forge-ca"
    @Option(help: "Signature digest: sha1 or sha256.") var digest = "sha256"
    @Option(help: "Receipt style: unified (iOS 7+) or transaction (iOS 6, first purchase only).") var style = "unified"
    @Flag(help: "Print a JSON request body ({\"receipt\": …}) instead of bare base64.") var json = false
    @Flag(help: "Write a StoreKit 2 signed transaction (JWS) instead of a receipt.") var signedTransaction = false
    @Option(help: "Directory of the mock Apple JWS chain (created on first use).") var jwsCaDirectory = ".local/demo/jws-ca"
    @Option(help: "With --signed-transaction: a mock App Store to register the transaction with.") var register: String?

    func run() async throws {
        do {
            if signedTransaction { return try await forgeSignedTransaction() }
            let bytes = try Forgery.receipt(
                bundleID: bundleId, environment: environment, products: products, mock: mock, caDirectory: caDirectory, digest: digest,
                style: style)
            let encoded = Data(bytes).base64EncodedString()
            print(json ? "{\"receipt\":\"\(encoded)\"}" : encoded)
        } catch let error as Forgery.OptionError {
            throw ValidationError(error.message)
        }
    }

    private func forgeSignedTransaction() async throws {
        let (jws, payload, environmentName) = try Forgery.signedTransaction(
            bundleID: bundleId, products: products, environment: environment, jwsCaDirectory: jwsCaDirectory)
        if let register { try await Forgery.register(payload, environment: environmentName, at: register) }
        print(json ? String(decoding: try JSONEncoder().encode(JSONValue.object(["signed_transaction": .string(jws)])), as: UTF8.self) : jws)
    }
}

extension All {
    /// `all` with its dev parts: the mock App Store in-process unless `APPSTORE_PRODUCTION_URL` is
    /// set, and with `--demo` the demo app, its forged requests and its backend, then the
    /// instructions once the API listens.
    func run(_ runtime: ReceiptQueueApp.Runtime) async throws {
        var runtime = runtime
        let directory = URL(fileURLWithPath: demoDirectory).standardizedFileURL
        var mock: MockAppStoreState?
        if runtime.configuration.apple.isDefaultMock {
            // The demo's mock signs with the chain `forge --signed-transaction` uses, so both agree.
            let authority = demo ? try MockAppleJWSAuthority.loadOrCreate(directory: Demo.jwsDirectory(directory)) : nil
            let state = MockAppStoreState(authority: authority)
            state.setSharedSecret(Demo.sharedSecret, for: Demo.bundleID)
            mock = state
        }
        let mockApplication = mock.map {
            MockAppStore.application(host: "127.0.0.1", port: runtime.configuration.apple.mockPort, state: $0, logger: runtime.logger)
        }
        if demo, runtime.configuration.secretsKey == nil {
            // The demo app's In-App Purchase key is sealed like any other; with a demo secrets key.
            runtime.configuration.secretsKey = try Demo.secretsKey(directory)
        }
        let setup = demo ? try prepareDemo(runtime.configuration, directory: directory, mock: mock) : nil
        if demo, runtime.configuration.trustRootsDirectory == nil {
            // The demo's receipts are signed by its own test CA: trust it, and only it, unless the
            // operator named a directory (which then must hold that CA too).
            runtime.configuration.trustRootsDirectory = Demo.trustDirectory(directory).path
        }
        let running = runtime.configuration
        try await runtime.all(
            first: mockApplication.map { [$0] } ?? [],
            // The demo's backend: receives every event of the demo app, checks its signature, logs it.
            beforeAPI: { [runtime] in
                guard let setup else { return [] }
                let port = Int(ProcessInfo.processInfo.environment["DEMO_BACKEND_PORT"] ?? "") ?? 9091
                return [try Demo.backend(port: port, logger: runtime.logger) { try registerDemoBackend($0, setup: setup, runtime: runtime) }]
            },
            onAPIRunning: { [mock] port in
                guard let setup else { return }
                // The mock App Store sends the demo app's notifications to this API, as Apple would to its URL.
                mock?.notifications.setTarget(.init(url: "http://\(running.api.host):\(port)\(setup.notificationPath)"), bundleID: setup.app.bundleID)
                // Unbuffered: the instructions must appear at once even when stdout is a pipe.
                FileHandle.standardOutput.write(
                    Data(
                        Demo.instructions(
                            setup, host: running.api.host, port: port, workers: running.worker.concurrency, mockPort: running.apple.mockPort,
                            psqlArguments: running.psqlArguments
                        ).utf8))
            })
    }

    /// Registers the demo app (once), issues it a new token (revoking older ones) and a new
    /// notification URL, and forges its requests into `directory`.
    ///
    /// The demo app also gets an In-App Purchase key (sealed with the configuration's secrets key),
    /// which the in-process `mock` learns, with the demo receipt's purchases and a StoreKit 2 purchase
    /// signed by the mock's chain: one app shows both paths, verifyReceipt and the Server API.
    private func prepareDemo(_ configuration: AppConfiguration, directory: URL, mock: MockAppStoreState?) throws -> DemoSetup {
        let admin = try ReceiptQueueApp.Admin(configuration, label: "demo")
        defer { admin.close() }
        let app: AppRecord
        let token: String
        if let existing = try admin.app(named: "demo") {
            app = existing
            token = try admin.rotateToken(appID: existing.id, revokingOthers: true, audit: AuditAction.commandLine("app.rotate_token"))
        } else {
            (app, token) = try admin.addApp(
                name: "demo", bundleID: Demo.bundleID, sharedSecret: Demo.sharedSecret, audit: AuditAction.commandLine("app.add"))
        }
        let files = try Demo.forge(bundleID: app.bundleID, directory: directory)
        var key = try admin.app(named: "demo")?.serverAPIKey
        if key == nil, configuration.secretsKey != nil {
            let new = try Demo.serverAPIKey()
            try admin.setServerAPIKey(
                appID: app.id, issuerID: new.issuerID, keyID: new.keyID, privateKeyPEM: new.privateKeyPEM,
                audit: AuditAction.commandLine("app.server_api_key.set"))
            key = new
        }
        if let mock, let key {
            try mock.serverAPI.addKey(key, bundleID: app.bundleID)
            mock.serverAPI.add(receipt: files.receipt, environment: .sandbox)
        }
        mock?.serverAPI.add(transactions: [files.transaction], environment: .sandbox)
        let notificationToken = try admin.rotateNotificationToken(appID: app.id, audit: AuditAction.commandLine("app.notification_url"))
        return DemoSetup(
            app: app, token: token, requestFile: files.requestFile, transactionFile: files.transactionFile,
            notificationPath: "/apple/notifications/\(app.name)/\(notificationToken)",
            refundableTransactionID: files.receipt.inApp.first { $0.expiresDate == nil }?.transactionID)
    }

    /// Registers the demo backend's `url` as the demo app's webhook endpoint (replacing the one an
    /// earlier run registered); returns its signing secret.
    private func registerDemoBackend(_ url: String, setup: DemoSetup, runtime: ReceiptQueueApp.Runtime) throws -> String {
        let admin = try runtime.admin(label: "demo")
        defer { admin.close() }
        for earlier in try admin.listWebhooks(appID: setup.app.id) where earlier.description == "demo backend" {
            try admin.removeWebhook(id: earlier.id, audit: AuditAction.commandLine("webhook.remove"))
        }
        return try admin.addWebhook(
            appID: setup.app.id, url: url, allowPrivate: true, description: "demo backend", audit: AuditAction.commandLine("webhook.add")
        ).secret
    }
}
