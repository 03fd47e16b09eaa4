import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

extension Apps {
    /// `apps server-api-key`: the In-App Purchase key the App Store Server API is called with.
    struct SetServerAPIKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "server-api-key",
            abstract: "Stores an app's In-App Purchase key for the App Store Server API (encrypted; never shown again).",
            discussion: """
                The key file is the .p8 App Store Connect issued (Users and Access > Integrations > In-App Purchase). \
                It is sealed with RECEIPTQ_SECRETS_KEY (32 random bytes, base64: `openssl rand -base64 32`), which every \
                worker needs too. With --remove the app's key is deleted.
                """)
        @Option(help: "The app's name.") var name: String
        @Option(help: "The issuer id of your App Store Connect team.") var issuerId: String?
        @Option(help: "The key's id (10 characters, shown beside the key in App Store Connect).") var keyId: String?
        @Option(help: "The .p8 file App Store Connect issued.") var keyFile: String?
        @Flag(help: "Remove the app's key instead.") var remove = false

        func validate() throws {
            if !remove && (issuerId == nil || keyId == nil || keyFile == nil) {
                throw ValidationError("--issuer-id, --key-id and --key-file are required (unless --remove)")
            }
        }

        func run() async throws {
            // The admin seals the key with the configuration's RECEIPTQ_SECRETS_KEY.
            let admin = try appsAdmin()
            defer { admin.close() }
            let app = try admin.requiredApp(named: name)
            guard let issuerId, let keyId, let keyFile, !remove else {
                print(
                    try admin.removeServerAPIKey(appID: app.id, audit: AuditAction.commandLine("app.server_api_key.remove"))
                        ? "removed" : "no In-App Purchase key to remove")
                return
            }
            let pem: String
            do {
                pem = try String(contentsOfFile: keyFile, encoding: .utf8)
            } catch {
                throw ValidationError("cannot read --key-file \(keyFile)")
            }
            do {
                try admin.setServerAPIKey(
                    appID: app.id, issuerID: issuerId, keyID: keyId, privateKeyPEM: pem, audit: AuditAction.commandLine("app.server_api_key.set"))
            } catch let error as AppAdminError {
                throw ValidationError("\(error)")
            }
            print("In-App Purchase key \(keyId) stored for \(app.name) (encrypted); backend: \(app.backend.rawValue)")
        }
    }

    /// `apps validation`: the backend, the sandbox policy, the device check and Apple's app id.
    struct SetValidation: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "validation",
            abstract: "Sets how an app's purchases are validated; options left out keep their value.",
            discussion: """
                --backend auto (the default) uses verifyReceipt while it answers and the App Store Server API once it is \
                gone (for an app with a key); verify_receipt or server_api pin one. Setting a backend by hand undoes an \
                automatic switch. --sandbox-policy accept (default: App Review buys in the sandbox), flag or reject.
                """)
        @Option(help: "The app's name.") var name: String
        @Option(help: "verify_receipt, server_api or auto.") var backend: String?
        @Option(help: "accept, flag or reject sandbox purchases in production.") var sandboxPolicy: String?
        @Option(help: "Check identifier_for_vendor against the receipt's device hash: on or off.") var deviceCheck: String?
        @Option(help: "Apple's numeric app id (checked against signed payloads).") var appAppleId: Int64?

        func run() async throws {
            let backend = try backend.map { text in
                guard let value = ValidationBackend(rawValue: text), value != .localJWS else {
                    throw ValidationError("--backend must be verify_receipt, server_api or auto")
                }
                return value
            }
            let policy = try sandboxPolicy.map { text in
                guard let value = SandboxPolicy(rawValue: text) else { throw ValidationError("--sandbox-policy must be accept, flag or reject") }
                return value
            }
            let device = try deviceCheck.map { text in
                switch text {
                case "on": true
                case "off": false
                default: throw ValidationError("--device-check must be on or off")
                }
            }
            let admin = try appsAdmin()
            defer { admin.close() }
            let app = try admin.requiredApp(named: name)
            try admin.setValidation(
                appID: app.id, backend: backend, sandboxPolicy: policy, checksDevice: device, appAppleID: appAppleId,
                audit: AuditAction.commandLine("app.validation"))
            guard let updated = try admin.app(named: name) else { return }
            print(
                "\(updated.name): backend \(updated.backend.rawValue), sandbox \(updated.sandboxPolicy.rawValue), "
                    + "device check \(updated.checksDevice ? "on" : "off"), app apple id \(updated.appAppleID.map(String.init) ?? "unknown")")
        }
    }
}
