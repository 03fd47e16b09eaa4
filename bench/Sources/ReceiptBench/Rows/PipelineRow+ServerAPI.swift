import Curl
import DevTools
import Foundation
import Libpq
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptSignature

/// The `server_api` levels of the pipeline: the same worker, queue and Postgres, with StoreKit 2
/// jobs (a transaction id each) that the worker validates through the App Store Server API of the
/// mock (Get Transaction History, then Get All Subscription Statuses: two calls per job, each at
/// the mock's latency), signing an ES256 JWT per app and verifying every JWS of the answers.
///
/// Apple limits each app (bundle id) to 50 calls per second per endpoint, and the worker's shared
/// token bucket keeps to that: one app could never go past 50 validations a second, whatever
/// receiptq does. The level spreads its jobs over `--server-api-apps` apps (default 40), each its
/// own bundle id and key id, as a validator serving many apps sees them, so that the worker, not
/// Apple's limit, is what is measured.
extension PipelineRow {
    /// What the server_api levels share: the key every bench app uses, the secrets key it is
    /// sealed with, the trust root of the mock's JWS chain.
    struct ServerAPISetup {
        var secretsKey: [UInt8]
        var privateKeyPEM: String
        var issuerID = "bench-issuer"
        var trustDirectory: URL
        var jwsDirectory: URL
        var apps: Int
    }

    /// Generates the key and the directories before the mock starts (it signs with the chain in
    /// `jwsDirectory`, which the workers trust).
    static func prepareServerAPI(_ context: Context, apps: Int) throws -> ServerAPISetup {
        let jwsDirectory = context.logDirectory.appendingPathComponent("jws-ca")
        let trustDirectory = context.logDirectory.appendingPathComponent("trust")
        try FileManager.default.createDirectory(at: trustDirectory, withIntermediateDirectories: true)
        let root = try MockAppleJWSAuthority.loadOrCreate(directory: jwsDirectory).root.pem
        try root.write(to: trustDirectory.appendingPathComponent("mock-apple-root.pem"), atomically: true, encoding: .utf8)
        return ServerAPISetup(
            secretsKey: (0..<32).map { _ in UInt8.random(in: 0...255) }, privateKeyPEM: try PrivateKey.generateP256().pemPKCS8(),
            trustDirectory: trustDirectory, jwsDirectory: jwsDirectory, apps: apps)
    }

    /// Tells the running mock to accept the bench key's JWTs under `keyID` for `bundleID`.
    static func registerServerAPIKey(_ context: Context, _ setup: ServerAPISetup, keyID: String, bundleID: String) throws {
        let body = try JSONEncoder().encode([
            "issuer_id": setup.issuerID, "key_id": keyID, "bundle_id": bundleID, "public_key_pem": setup.privateKeyPEM,
        ])
        let response = try CurlEasy(options: CurlOptions()).perform(
            HTTPRequest(
                method: "POST", url: "\(context.mockBase)/mock/server-api/keys", headers: [(name: "Content-Type", value: "application/json")],
                body: [UInt8](body)))
        guard response.status == 201 else { throw BenchFailure(description: "mock /mock/server-api/keys answered \(response.status)") }
    }

    /// `setup.apps` fresh apps on the Server API backend, each with the bench key (sealed), and
    /// the JWS trust `jobs` needs: `local` for jobs stored as the door read them, else `apple`.
    static func makeServerAPIApps(_ context: Context, _ setup: ServerAPISetup, label: String, jobs: ServerAPIJobs) throws -> [AppRecord] {
        let admin = AppAdmin(connection: context.postgres, secrets: try SecretBox(key: setup.secretsKey))
        return try (0..<setup.apps).map { index in
            let bundleID = "\(Context.bundleID).sk2.\(label).\(index)"
            let keyID = "BENCH\(label.hashValue & 0xFFFF)K\(index)"
            let app = try context.makeApp("\(label)-\(index)", bundleID: bundleID)
            try registerServerAPIKey(context, setup, keyID: keyID, bundleID: bundleID)
            try admin.setServerAPIKey(appID: app.id, issuerID: setup.issuerID, keyID: keyID, privateKeyPEM: setup.privateKeyPEM)
            try admin.setValidation(appID: app.id, backend: .serverAPI)
            try admin.setJWSTrust(appID: app.id, trust: jobs == .local ? .local : .apple, freshness: 24 * 3_600)
            return app
        }
    }

    /// Transactions signed per app as devices hold them (the mock's synthesized monthly
    /// subscription, signed now by the mock's chain), `poolPerApp` each: entry `i` is the purchase
    /// `tag + serial(i)` of app `i % apps.count`, as ``JobFactory`` reads the pool. For
    /// `knownCustomers`, each customer's history cursor is stored, as after a first validation.
    /// Signed before the level (~0.1 ms each), so the feeder's CPU is not the signer's.
    static func signServerAPIPool(
        _ context: Context, _ setup: ServerAPISetup, apps: [AppRecord], tag: String, knownCustomers: Bool, poolPerApp: Int = 200
    ) throws -> [String] {
        let authority = try MockAppleJWSAuthority.loadOrCreate(directory: setup.jwsDirectory)
        let now = Date()
        var pool: [String] = []
        var cursors: [JSONValue] = []
        for index in 0..<(apps.count * poolPerApp) {
            let app = apps[index % apps.count]
            let id = "\(tag)\(JobFactory.serial(index))"
            var payload = MockServerAPIState.synthesizedTransaction(id: id, bundleID: app.bundleID, at: now).objectValue ?? [:]
            payload["signedDate"] = .number((now.timeIntervalSince1970 * 1000).rounded())
            pool.append(try authority.sign(.object(payload)))
            cursors.append(.object(["app_id": .string(app.id.uuidString), "id": .string(id)]))
        }
        if knownCustomers {
            let rows = String(decoding: try JSONEncoder().encode(JSONValue.array(cursors)), as: UTF8.self)
            _ = try context.postgres.query(
                """
                INSERT INTO transaction_history_cursors (app_id, original_transaction_id, environment, revision)
                SELECT app_id, id, 'production', '1' FROM jsonb_to_recordset(\(rows)::jsonb) AS c(app_id uuid, id text)
                ON CONFLICT DO NOTHING
                """)
        }
        return pool
    }

    /// The worker settings a server_api level adds: the secrets key, the mock's Server API, and
    /// its JWS root among the trust roots.
    static func serverAPIEnvironment(_ context: Context, _ setup: ServerAPISetup) -> [String: String] {
        [
            "RECEIPTQ_SECRETS_KEY": Data(setup.secretsKey).base64EncodedString(),
            "RECEIPTQ_TRUST_ROOTS_DIR": setup.trustDirectory.path,
            "APPSTORE_SERVER_API_PRODUCTION_URL": "\(context.mockBase)/storekit/production",
            "APPSTORE_SERVER_API_SANDBOX_URL": "\(context.mockBase)/storekit/sandbox",
        ]
    }
}
