import Foundation
import Libpq
import Logging
import OpenSSL
import PostgresStore
import ReceiptCore

extension ReceiptQueueApp {
    /// The administration the `receiptq` commands (and the demo) perform on the database: apps and
    /// their tokens, keys and softphone credentials, operators and their audit log, webhook
    /// endpoints, notification checks. One Postgres connection, opened here, closed by ``close()``.
    ///
    /// The executable reaches every adapter through this façade, so it imports nothing of the
    /// project but `ReceiptQueueApp` and `ReceiptCore`.
    ///
    /// Not thread-safe: one command uses it from one task.
    public final class Admin {
        let configuration: AppConfiguration
        let connection: PostgresConnection
        /// Seals and opens In-App Purchase keys and webhook secrets (nil without `RECEIPTQ_SECRETS_KEY`).
        let secrets: SecretBox?

        /// Opens the connection.
        /// - Parameters:
        ///   - label: the connection's name (`apps`, `webhooks`, …).
        ///   - logger: the connection's (default: the task-local `Logger.current`).
        public init(_ configuration: AppConfiguration, label: String, logger: Logger = Logger.current) throws {
            self.configuration = configuration
            connection = try PostgresConnection(configuration: configuration.postgres, label: label, logger: logger)
            secrets = try configuration.secretsKey.map { try SecretBox(key: $0) }
        }

        /// Closes the connection.
        public func close() { connection.close() }

        var apps: AppAdmin { AppAdmin(connection: connection, secrets: secrets) }

        /// Registers an app and issues its first token.
        /// - Returns: the app and the token (shown once: only its hash is stored).
        /// - Throws: ``AppAdminError`` for a bundle id that is not reverse-DNS text.
        public func addApp(
            name: String?, bundleID: String, otherBundleIDs: [String] = [], sharedSecret: String?, excludeOldTransactions: Bool = false
        ) throws -> (app: AppRecord, token: String) {
            try apps.addApp(
                name: name, bundleID: bundleID, otherBundleIDs: otherBundleIDs, sharedSecret: sharedSecret,
                excludeOldTransactions: excludeOldTransactions)
        }

        /// Every registered app.
        public func listApps() throws -> [AppRecord] { try apps.listApps() }

        /// The app called `name`, if any.
        public func app(named name: String) throws -> AppRecord? { try apps.app(named: name) }

        /// Every app's tokens (active and revoked), by app id.
        public func tokens() throws -> [UUID: [TokenInfo]] { try apps.tokens() }

        /// Issues a new API token; the app's others are revoked when `revokingOthers`.
        public func rotateToken(appID: UUID, revokingOthers: Bool) throws -> String {
            try apps.rotateToken(appID: appID, revokingOthers: revokingOthers)
        }

        /// Revokes the app's active token starting with `prefix` (or equal to it).
        /// - Throws: ``AppAdminError`` for a malformed, unknown or ambiguous prefix.
        public func revokeToken(appID: UUID, prefix: String) throws -> TokenInfo { try apps.revokeToken(appID: appID, prefix: prefix) }

        /// Whether the app has a notification URL.
        public func hasNotificationURL(appID: UUID) throws -> Bool { try apps.hasNotificationURL(appID: appID) }

        /// Issues the app's notification token (the URL Apple had stops working).
        public func rotateNotificationToken(appID: UUID) throws -> String { try apps.rotateNotificationToken(appID: appID) }

        /// Stores the app's In-App Purchase key, sealed with `RECEIPTQ_SECRETS_KEY`.
        /// - Throws: ``AppAdminError`` without a secrets key, for a key that is not P-256, or bad ids.
        public func setServerAPIKey(appID: UUID, issuerID: String, keyID: String, privateKeyPEM: String) throws {
            try apps.setServerAPIKey(appID: appID, issuerID: issuerID, keyID: keyID, privateKeyPEM: privateKeyPEM)
        }

        /// Removes the app's In-App Purchase key; returns whether it had one.
        public func removeServerAPIKey(appID: UUID) throws -> Bool { try apps.removeServerAPIKey(appID: appID) }

        /// Sets how the app's purchases are validated; nil leaves a setting as it is.
        public func setValidation(
            appID: UUID, backend: ValidationBackend?, sandboxPolicy: SandboxPolicy?, checksDevice: Bool?, appAppleID: Int64?
        ) throws {
            try apps.setValidation(
                appID: appID, backend: backend, sandboxPolicy: sandboxPolicy, checksDevice: checksDevice, appAppleID: appAppleID)
        }

        /// Sets (or replaces) the app's Cloud Softphone credentials; only their HA1 values are stored.
        /// - Throws: ``SoftphoneCredentialsError`` for a bad username or password, or one another app uses.
        public func setSoftphoneCredentials(appID: UUID, username: String, password: String) throws {
            try SoftphoneAdmin(connection: connection).setCredentials(appID: appID, username: username, password: password)
        }

        /// Removes the app's Cloud Softphone credentials; returns whether it had any.
        public func removeSoftphoneCredentials(appID: UUID) throws -> Bool {
            try SoftphoneAdmin(connection: connection).removeCredentials(appID: appID)
        }
    }
}
