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

        /// Registers an app and issues its first token, audited as `app.add`.
        /// - Returns: the app and the token (shown once: only its hash is stored).
        /// - Throws: ``AppAdminError`` for a bundle id that is not reverse-DNS text.
        public func addApp(
            name: String?, bundleID: String, otherBundleIDs: [String] = [], sharedSecret: String?, excludeOldTransactions: Bool = false,
            audit: AuditAction
        ) throws -> (app: AppRecord, token: String) {
            try trail.run(audit.with(target: "app \(name ?? bundleID) (\(bundleID))")) {
                try apps.addApp(
                    name: name, bundleID: bundleID, otherBundleIDs: otherBundleIDs, sharedSecret: sharedSecret,
                    excludeOldTransactions: excludeOldTransactions)
            }
        }

        /// Every registered app.
        public func listApps() throws -> [AppRecord] { try apps.listApps() }

        /// The app called `name`, if any.
        public func app(named name: String) throws -> AppRecord? { try apps.app(named: name) }

        /// Every app's tokens (active and revoked), by app id.
        public func tokens() throws -> [UUID: [TokenInfo]] { try apps.tokens() }

        /// Issues a new API token; the app's others are revoked when `revokingOthers`. Audited.
        public func rotateToken(appID: UUID, revokingOthers: Bool, audit: AuditAction) throws -> String {
            try trail.run(audit.on(appID, revokingOthers ? "revoking the others" : "keeping the others")) {
                try apps.rotateToken(appID: appID, revokingOthers: revokingOthers)
            }
        }

        /// Revokes the app's active token starting with `prefix` (or equal to it).
        /// - Throws: ``AppAdminError`` for a malformed, unknown or ambiguous prefix.
        public func revokeToken(appID: UUID, prefix: String, audit: AuditAction) throws -> TokenInfo {
            try trail.run(audit.on(appID, "token \(prefix.prefix(7))")) { try apps.revokeToken(appID: appID, prefix: prefix) }
        }

        /// Whether the app has a notification URL.
        public func hasNotificationURL(appID: UUID) throws -> Bool { try apps.hasNotificationURL(appID: appID) }

        /// Issues the app's notification token (the URL Apple had stops working). Audited.
        public func rotateNotificationToken(appID: UUID, audit: AuditAction) throws -> String {
            try trail.run(audit.on(appID)) { try apps.rotateNotificationToken(appID: appID) }
        }

        /// Stores the app's In-App Purchase key, sealed with `RECEIPTQ_SECRETS_KEY`.
        /// - Throws: ``AppAdminError`` without a secrets key, for a key that is not P-256, or bad ids.
        public func setServerAPIKey(appID: UUID, issuerID: String, keyID: String, privateKeyPEM: String, audit: AuditAction) throws {
            try trail.run(audit.on(appID, "key \(keyID)")) {
                try apps.setServerAPIKey(appID: appID, issuerID: issuerID, keyID: keyID, privateKeyPEM: privateKeyPEM)
            }
        }

        /// Removes the app's In-App Purchase key; returns whether it had one.
        public func removeServerAPIKey(appID: UUID, audit: AuditAction) throws -> Bool {
            try trail.run(audit.on(appID)) { try apps.removeServerAPIKey(appID: appID) }
        }

        /// Sets how the app's purchases are validated; nil leaves a setting as it is.
        public func setValidation(
            appID: UUID, backend: ValidationBackend?, sandboxPolicy: SandboxPolicy?, checksDevice: Bool?, appAppleID: Int64?,
            audit: AuditAction
        ) throws {
            let changes = [
                backend.map { "backend \($0.rawValue)" }, sandboxPolicy.map { "sandbox \($0.rawValue)" },
                checksDevice.map { "device check \($0 ? "on" : "off")" }, appAppleID.map { "app Apple id \($0)" },
            ].compactMap { $0 }
            try trail.run(audit.on(appID, changes.joined(separator: ", "))) {
                try apps.setValidation(
                    appID: appID, backend: backend, sandboxPolicy: sandboxPolicy, checksDevice: checksDevice, appAppleID: appAppleID)
            }
        }

        /// Sets how the app answers Apple's consumption requests (the refund defence).
        public func setConsumptionPolicy(appID: UUID, policy: ConsumptionPolicy, audit: AuditAction) throws {
            try trail.run(audit.on(appID, "consumption policy \(policy.rawValue)")) {
                _ = try apps.setConsumptionPolicy(appID: appID, policy: policy)
            }
        }

        /// Sets (or replaces) the app's Cloud Softphone credentials; only their HA1 values are stored.
        /// - Throws: ``SoftphoneCredentialsError`` for a bad username or password, or one another app uses.
        public func setSoftphoneCredentials(appID: UUID, username: String, password: String, audit: AuditAction) throws {
            try trail.run(audit.on(appID, "username \(username)")) {
                try SoftphoneAdmin(connection: connection).setCredentials(appID: appID, username: username, password: password)
            }
        }

        /// Removes the app's Cloud Softphone credentials; returns whether it had any.
        public func removeSoftphoneCredentials(appID: UUID, audit: AuditAction) throws -> Bool {
            try trail.run(audit.on(appID)) { try SoftphoneAdmin(connection: connection).removeCredentials(appID: appID) }
        }

        var trail: AuditTrail { AuditTrail(connection: connection) }
    }
}

extension AuditAction {
    /// The audit line's "who" for a command run at a shell: the login that ran it (`cli:alice`).
    public static func commandLine(_ action: String) -> AuditAction {
        let environment = ProcessInfo.processInfo.environment
        let named = [environment["SUDO_USER"], environment["USER"], environment["LOGNAME"]].compactMap { $0 }.first { !$0.isEmpty }
        let login = named ?? getpwuid(geteuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "uid \(geteuid())"
        return AuditAction(actor: "cli:\(login)", role: nil, action: action, source: "cli")
    }

    /// This action on app `appID`, with `detail` (never a secret) as its target.
    func on(_ appID: UUID, _ detail: String? = nil) -> AuditAction {
        var copy = self
        copy.appID = appID
        if let detail, !detail.isEmpty { copy.target = detail }
        return copy
    }
}
