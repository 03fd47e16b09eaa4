import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

struct Apps: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Registers apps and manages their API tokens.",
        subcommands: [
            Add.self, List.self, RotateToken.self, RevokeToken.self, SetSoftphoneCredentials.self, SetServerAPIKey.self,
            SetValidation.self, NotificationURL.self, SetJWSTrust.self, SetTransferRule.self, Resync.self, ConsumptionPolicyCommand.self,
            Retention.self,
        ])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Registers an app and prints its first API token.")
        @Option(help: "The app's bundle id.") var bundleId: String
        @Option(
            name: .customLong("also-bundle-id"),
            help: "Another bundle id whose receipts belong to this app (an app family, e.g. its macOS edition); repeatable.")
        var alsoBundleIds: [String] = []
        @Option(help: "A unique name for the app (default: the bundle id).") var name: String?
        @Option(help: "The App Store shared secret (or set RECEIPTQ_SHARED_SECRET, which stays out of `ps`).")
        var sharedSecret: String?
        @Flag(help: "Send exclude-old-transactions to Apple.") var excludeOldTransactions = false

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let secret = sharedSecret ?? ProcessInfo.processInfo.environment["RECEIPTQ_SHARED_SECRET"]
            let (app, token) = try admin.addApp(
                name: name, bundleID: bundleId, otherBundleIDs: alsoBundleIds, sharedSecret: secret,
                excludeOldTransactions: excludeOldTransactions, audit: AuditAction.commandLine("app.add"))
            print("app_id: \(app.id.uuidString.lowercased())\nname: \(app.name)\ntoken: \(token)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Lists registered apps and their tokens (secrets and tokens are not shown, only token prefixes).")

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let tokens = try admin.tokens()
            for app in try admin.listApps() {
                let appTokens = tokens[app.id] ?? []
                let active = appTokens.filter(\.isActive)
                // The prefixes are what `revoke-token --prefix` takes.
                let prefixes = active.isEmpty ? "" : " (\(active.map(\.prefix).joined(separator: ", ")))"
                print(
                    "\(app.id.uuidString.lowercased())  \(app.name)  \(app.bundleIDs.joined(separator: ","))  secret: \(app.sharedSecret == nil ? "no" : "yes")"
                        + "  backend: \(app.backend.rawValue)\(app.effectiveBackend == .serverAPI && app.backend == .auto ? " (switched to server_api)" : "")"
                        + "  server-api-key: \(app.serverAPIKeyID ?? "none")  sandbox: \(app.sandboxPolicy.rawValue)"
                        + "  jws_trust: \(app.effectiveJWSTrust.rawValue)\(app.jwsTrust.trust == nil ? " (default)" : "")"
                        + " (fresh \(Int(app.jwsTrust.freshness / 3600))h)"
                        + "  tokens: \(active.count) active\(prefixes), \(appTokens.count - active.count) revoked")
            }
        }
    }

    struct NotificationURL: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "notification-url",
            abstract: "Issues the URL to give Apple for App Store Server Notifications (V2 or V1) and prints it once.",
            discussion: """
                The URL is /apple/notifications/{name}/{token}: the token is random and only its hash is stored, so
                the URL is printed only here. --rotate issues a new one; the URL Apple was given stops working.
                """)
        @Option(help: "The app's name.") var name: String
        @Option(help: "The public base URL of the ingestion nodes (default: RECEIPTQ_PUBLIC_URL, else http://127.0.0.1:8080).")
        var baseUrl: String?
        @Flag(help: "Replace an existing notification URL.") var rotate = false

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let app = try admin.requiredApp(named: name)
            if try admin.hasNotificationURL(appID: app.id), !rotate {
                throw ValidationError("the app already has a notification URL; pass --rotate to replace it (Apple's stops working)")
            }
            let token = try admin.rotateNotificationToken(appID: app.id, audit: AuditAction.commandLine("app.notification_url"))
            let base = baseUrl ?? ProcessInfo.processInfo.environment["RECEIPTQ_PUBLIC_URL"] ?? "http://127.0.0.1:8080"
            print(Self.url(base: base, name: app.name, token: token))
        }

        /// The URL for `name` and `token` under `base`.
        static func url(base: String, name: String, token: String) -> String {
            let segment = name.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? name
            return "\(base.hasSuffix("/") ? String(base.dropLast()) : base)/apple/notifications/\(segment)/\(token)"
        }
    }

    struct RotateToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-token", abstract: "Issues a new API token; older tokens are revoked unless --keep-old.")
        @Option(help: "The app's name.") var name: String
        @Flag(help: "Keep the app's older tokens working.") var keepOld = false

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let app = try admin.requiredApp(named: name)
            print("token: \(try admin.rotateToken(appID: app.id, revokingOthers: !keepOld, audit: AuditAction.commandLine("app.rotate_token")))")
        }
    }

    struct RevokeToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke-token",
            abstract: "Revokes one API token of an app; its other tokens keep working.",
            discussion: "A running API may accept the token for up to 30 s more (its token cache).")
        @Option(help: "The app's name.") var name: String
        @Option(help: "The token's prefix as `apps list` shows it (rq_ and 4 characters), or the whole token.")
        var prefix: String

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let app = try admin.requiredApp(named: name)
            do {
                let token = try admin.revokeToken(appID: app.id, prefix: prefix, audit: AuditAction.commandLine("app.revoke_token"))
                print("revoked: \(token.prefix)")
            } catch let error as AppAdminError {
                throw ValidationError("\(error)")
            }
        }
    }
}

extension Apps {
    /// `apps softphone-credentials`: what the Cloud Softphone web service authenticates with.
    struct SetSoftphoneCredentials: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "softphone-credentials",
            abstract: "Sets the username and password an app's Cloud Softphone uses at /cloudsoftphone/iap.",
            discussion: """
                The password is read from RECEIPTQ_SOFTPHONE_PASSWORD, or prompted for (never taken from the \
                command line, where `ps` shows it). Only its HTTP Digest HA1 values are stored.
                """)
        @Option(help: "The app's name.") var name: String
        @Option(help: "The username the softphone sends (unique across apps).") var username: String?
        @Flag(help: "Remove the app's softphone credentials instead.") var remove = false

        func validate() throws {
            if !remove && username == nil { throw ValidationError("--username is required (unless --remove)") }
        }

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let app = try admin.requiredApp(named: name)
            guard let username, !remove else {
                print(
                    try admin.removeSoftphoneCredentials(appID: app.id, audit: AuditAction.commandLine("app.softphone_credentials.remove"))
                        ? "removed" : "no softphone credentials to remove")
                return
            }
            if let problem = SoftphoneCredentials.problem(username: username) {
                throw ValidationError("--username \(problem)")
            }
            let password = try readPassword(variable: "RECEIPTQ_SOFTPHONE_PASSWORD", label: "Softphone password")
            do {
                try admin.setSoftphoneCredentials(
                    appID: app.id, username: username, password: password, audit: AuditAction.commandLine("app.softphone_credentials.set"))
            } catch let failure as SoftphoneCredentialsError {
                throw ValidationError(failure.message)
            }
            print("softphone credentials set: username \(username), realm \(SoftphoneCredentials.realm)")
        }
    }
}

/// The administration of an `apps` command; the caller closes it.
func appsAdmin() throws -> ReceiptQueueApp.Admin {
    try ReceiptQueueApp.Runtime.bootstrap(label: "apps").admin(label: "apps")
}

extension ReceiptQueueApp.Admin {
    /// The app called `name`, or the usage error every `apps` command gives for an unknown name.
    func requiredApp(named name: String) throws -> AppRecord {
        guard let app = try app(named: name) else { throw ValidationError("no app named \(name)") }
        return app
    }
}
