import ArgumentParser
import Foundation
import Libpq
import Logging
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature
import ServiceLifecycle

struct All: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Runs every role in one process: API, workers, scheduler, and (unless APPSTORE_PRODUCTION_URL is set) the mock App Store.")

    @Flag(help: "Register a demo app, forge a demo receipt, and print the curl commands to try it.")
    var demo = false

    @Option(help: "Where the demo keeps its test CA and request file.")
    var demoDirectory = ".local/demo"

    func run() async throws {
        var (configuration, logger) = try bootstrap(label: "all")
        let applied = try ReceiptQueueApp.migrate(configuration, logger: logger)
        if !applied.isEmpty { logger.info("Migrations applied", metadata: ["migrations.applied": .array(applied.map { .string($0) })]) }

        var services: [any Service] = []
        let demoURL = URL(fileURLWithPath: demoDirectory).standardizedFileURL
        var mock: MockAppStoreState?
        if configuration.appStoreIsDefaultMock {
            // The demo's mock signs with the chain `forge --signed-transaction` uses, so both agree.
            let authority = demo ? try MockAppleJWSAuthority.loadOrCreate(directory: ReceiptQueueApp.demoJWSDirectory(demoURL)) : nil
            let state = MockAppStoreState(authority: authority)
            state.setSharedSecret(ReceiptQueueApp.demoSecret, for: ReceiptQueueApp.demoBundleID)
            services.append(
                MockAppStore.application(
                    host: "127.0.0.1", port: configuration.mockAppStorePort, state: state, logger: logger))
            mock = state
        }
        if demo, configuration.secretsKey == nil {
            // The demo app's In-App Purchase key is sealed like any other; with a demo secrets key.
            configuration.secretsKey = try ReceiptQueueApp.demoSecretsKey(demoURL)
        }
        let setup = demo ? try ReceiptQueueApp.prepareDemo(configuration, directory: demoURL, mock: mock) : nil
        if demo, configuration.trustRootsDirectory == nil {
            // The demo's receipts are signed by its own test CA: trust it, and only it, unless the
            // operator named a directory (which then must hold that CA too).
            configuration.trustRootsDirectory = ReceiptQueueApp.demoTrustDirectory(demoURL).path
        }
        services.append(try ReceiptQueueApp.makeWorker(configuration, metrics: metrics, logger: logger))
        services.append(ReceiptQueueApp.makeScheduler(configuration, metrics: metrics, logger: logger))
        services.append(ReceiptQueueApp.makeWebhookDispatcher(configuration, metrics: metrics, logger: logger))
        if let history = try ReceiptQueueApp.makeNotificationSweep(configuration, metrics: metrics, logger: logger) {
            services.append(history.service)
        }
        if let setup {
            // The demo's backend: receives every event of the demo app, checks its signature, logs it.
            services.append(try demoBackend(setup, configuration: configuration, logger: logger))
        }
        let running = configuration
        let demoMock = mock
        services.append(
            try ReceiptQueueApp.makeAPI(configuration, metrics: metrics, logger: logger) { port in
                if let setup {
                    // The mock App Store sends the demo app's notifications to this API, as Apple would to its URL.
                    demoMock?.notifications.setTarget(
                        .init(url: "http://\(running.httpHost):\(port)\(setup.notificationPath)"), bundleID: setup.app.bundleID)
                    printDemo(setup, host: running.httpHost, port: port, configuration: running)
                }
            })
        try await ReceiptQueueApp.run(withMetricsServer(services, configuration, logger: logger), logger: logger)
    }

    /// A webhook receiver standing in for the demo app's backend on `DEMO_BACKEND_PORT` (default
    /// 9091), registered as the demo app's endpoint (replacing the one an earlier run registered).
    private func demoBackend(_ setup: DemoSetup, configuration: AppConfiguration, logger: Logger) throws -> any Service {
        let port = Int(ProcessInfo.processInfo.environment["DEMO_BACKEND_PORT"] ?? "") ?? 9091
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "demo", logger: logger)
        defer { connection.close() }
        let admin = WebhookAdmin(connection: connection, secrets: try configuration.secretsKey.map { try SecretBox(key: $0) })
        for earlier in try admin.list(appID: setup.app.id) where earlier.description == "demo backend" {
            try admin.remove(id: earlier.id, audit: cliAudit("webhook.remove"))
        }
        let receiver = WebhookReceiver(secret: "") { delivery in
            logger.notice(
                "Demo backend received \(delivery.type)",
                metadata: [
                    "event.id": "\(delivery.eventID)", "signature.valid": "\(delivery.signatureValid)",
                    "user": "\(delivery.event?["user_identifier"]?.stringValue ?? "-")",
                ])
        }
        let (_, secret) = try admin.add(
            appID: setup.app.id, url: "http://127.0.0.1:\(port)\(receiver.path)", allowPrivate: true, description: "demo backend",
            audit: cliAudit("webhook.add"))
        receiver.setSecret(secret)
        return receiver.application(host: "127.0.0.1", port: port, logger: logger)
    }

    private func printDemo(_ setup: DemoSetup, host: String, port: Int, configuration: AppConfiguration) {
        let base = "http://\(host):\(port)/client/itunes_connect/receipts"
        // Unbuffered: the instructions must appear at once even when stdout is a pipe.
        FileHandle.standardOutput.write(
            Data(
                """

                receiptq is running: API \(base), workers ×\(configuration.workerConcurrency), scheduler, mock App Store.
                Demo app "\(setup.app.name)" (bundle id \(setup.app.bundleID)), API token (shown once):

                    export RQ_TOKEN=\(setup.token)

                Post the forged demo receipt (answers 200 once validated, 206 if the worker needs longer):

                    curl -sS -X POST \(base) -H "Authorization: Bearer $RQ_TOKEN" -H 'Content-Type: application/json' --data @\(setup.requestFile.path) | tee /tmp/receiptq-post.json

                Read it back:

                    curl -sS \(base)/$(sed -E 's/.*"id":"([^"]+)".*/\\1/' /tmp/receiptq-post.json) -H "Authorization: Bearer $RQ_TOKEN"

                StoreKit 2: post a signed transaction (validated by a worker through the mock App Store Server API):

                    curl -sS -X POST http://\(host):\(port)/client/transactions -H "Authorization: Bearer $RQ_TOKEN" -H 'Content-Type: application/json' --data @\(setup.transactionFile.path)

                What the demo user is entitled to now (its monthly subscription, re-polled before it expires, and a non-consumable):

                    curl -sS 'http://\(host):\(port)/client/subscriptions?user_identifier=demo-user-1' -H "Authorization: Bearer $RQ_TOKEN"

                App Store Server Notifications: the mock App Store posts the demo app's to http://\(host):\(port)\(setup.notificationPath)
                (in production, `receiptq apps notification-url --name NAME` issues the URL to give Apple). Refund the demo's
                non-consumable at "Apple" (sent three times, as Apple's retries would), then list the entitlements again: it is gone.

                    curl -sS -X POST http://127.0.0.1:\(configuration.mockAppStorePort)/mock/notifications/events -H 'Content-Type: application/json' -d '{"environment":"Sandbox","transaction_id":"\(setup.refundableTransactionID ?? "")","type":"REFUND","copies":3}'

                The dashboard lists each notification once: http://\(host):\(port)/admin/notifications

                Events: every change above was also delivered, signed, to the demo backend's webhook endpoint (see the log lines
                "Demo backend received …"; `receiptq webhooks list`). A backend that pulls instead reads them in order:

                    curl -sS 'http://\(host):\(port)/client/events?limit=20' -H "Authorization: Bearer $RQ_TOKEN"

                And see the row in Postgres:

                    psql -h \(configuration.postgres.hostList) -p \(configuration.postgres.portList) -U \(configuration.postgres.user) \(configuration.postgres.database) -c 'SELECT id, status, environment, bundle_id FROM receipts ORDER BY created_at DESC LIMIT 5'

                Ctrl-C stops everything (gracefully).

                """.utf8))
    }
}
