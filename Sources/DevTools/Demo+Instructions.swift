import Foundation
import ReceiptCore

extension Demo {
    /// What the demo prints once the API listens: the token, and the commands to try each path.
    /// - Parameters:
    ///   - host: the API's host; `port` its port.
    ///   - workers: the worker's concurrency.
    ///   - mockPort: the mock App Store's port.
    ///   - psqlArguments: `psql`'s connection arguments for the configured database.
    public static func instructions(
        _ setup: DemoSetup, host: String, port: Int, workers: Int, mockPort: Int, psqlArguments: String
    ) -> String {
        let base = "http://\(host):\(port)/client/itunes_connect/receipts"
        return
            """

            receiptq is running: API \(base), workers ×\(workers), scheduler, mock App Store.
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

                curl -sS -X POST http://127.0.0.1:\(mockPort)/mock/notifications/events -H 'Content-Type: application/json' -d '{"environment":"Sandbox","transaction_id":"\(setup.refundableTransactionID ?? "")","type":"REFUND","copies":3}'

            The dashboard lists each notification once: http://\(host):\(port)/admin/notifications

            Events: every change above was also delivered, signed, to the demo backend's webhook endpoint (see the log lines
            "Demo backend received …"; `receiptq webhooks list`). A backend that pulls instead reads them in order:

                curl -sS 'http://\(host):\(port)/client/events?limit=20' -H "Authorization: Bearer $RQ_TOKEN"

            And see the row in Postgres:

                psql \(psqlArguments) -c 'SELECT id, status, environment, bundle_id FROM receipts ORDER BY created_at DESC LIMIT 5'

            Ctrl-C stops everything (gracefully).

            """
    }
}
