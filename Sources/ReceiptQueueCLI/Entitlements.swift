import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

struct EntitlementsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "entitlements", abstract: "An app's named entitlements (entitlement → products), and grants to one user.",
        discussion: """
            `GET /client/customers/{user}` answers the entitlements a user holds by name: from the products they bought or
            subscribe to, as the catalogue maps them, and from operators' grants. See the README's "Named entitlements".
            """,
        subcommands: [List.self, Define.self, Remove.self, Grant.self, Revoke.self, Grants.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists the app's catalogue.")
        @Option(help: "The app's name.") var app: String

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let catalogue = try admin.entitlementCatalogue(appID: try admin.requiredApp(named: app).id)
            if catalogue.isEmpty { print("No entitlements: add one with `receiptq entitlements set`.") }
            for definition in catalogue {
                print("\(definition.id)  \(definition.products.joined(separator: ","))\(definition.description.map { "  \($0)" } ?? "")")
            }
        }
    }

    struct Define: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "set", abstract: "Creates or replaces one entitlement.")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The entitlement's id (a-z, 0-9, _, -, ., at most 64).") var entitlement: String
        @Option(help: "The product ids that grant it, comma-separated.") var products: String
        @Option(help: "A note for operators.") var description: String?

        func run() async throws {
            let list = products.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            let definition: EntitlementDefinition
            switch EntitlementDefinition.validate(id: entitlement, products: list, description: description) {
            case .success(let value): definition = value
            case .failure(let problem): throw ValidationError("--\(problem.field == "entitlement" ? "entitlement" : problem.field) \(problem.reason)")
            }
            let admin = try appsAdmin()
            defer { admin.close() }
            try admin.defineEntitlement(
                definition, appID: try admin.requiredApp(named: app).id, audit: AuditAction.commandLine("entitlement.define"))
            print("\(definition.id): \(definition.products.joined(separator: ","))")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Removes one entitlement (its grants stay).")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The entitlement's id.") var entitlement: String

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            do {
                try admin.removeEntitlement(
                    entitlement, appID: try admin.requiredApp(named: app).id, audit: AuditAction.commandLine("entitlement.remove"))
            } catch EntitlementAdminError.unknownEntitlement {
                throw ValidationError("no entitlement \(entitlement) in \(app)'s catalogue")
            }
            print("Removed \(entitlement).")
        }
    }

    struct Grant: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Grants an entitlement to one user, until a time or until revoked.")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The user's identifier.") var user: String
        @Option(help: "The entitlement's id.") var entitlement: String
        @Option(help: "Until when (ISO 8601, e.g. 2027-01-31T00:00:00Z); default: until revoked.") var until: String?
        @Option(help: "Why, for the audit log and the customer view.") var reason: String?

        func run() async throws {
            var expiresAt: Date?
            if let until {
                guard let date = ISO8601DateFormatter().date(from: until), date > Date() else {
                    throw ValidationError("--until must be a future ISO 8601 time such as 2027-01-31T00:00:00Z")
                }
                expiresAt = date
            }
            guard !user.isEmpty, user.unicodeScalars.count <= 255 else { throw ValidationError("--user must be 1 to 255 characters") }
            let admin = try appsAdmin()
            defer { admin.close() }
            do {
                let grant = try admin.grantEntitlement(
                    entitlement, userIdentifier: user, appID: try admin.requiredApp(named: app).id, expiresAt: expiresAt, reason: reason,
                    audit: AuditAction.commandLine("entitlement.grant"))
                print(
                    "grant: \(grant.id.canonical)  \(grant.entitlement) to \(grant.userIdentifier) \(grant.expiresAt.map { "until \($0)" } ?? "until revoked")"
                )
            } catch EntitlementAdminError.unknownEntitlement {
                throw ValidationError("no entitlement \(entitlement) in \(app)'s catalogue: add it with `receiptq entitlements set`")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revokes one grant.")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The user's identifier.") var user: String
        @Option(help: "The grant's id.") var grant: String

        func run() async throws {
            guard let id = UUID(uuidString: grant) else { throw ValidationError("--grant must be a grant id (a UUID)") }
            let admin = try appsAdmin()
            defer { admin.close() }
            do {
                let revoked = try admin.revokeEntitlementGrant(
                    id, userIdentifier: user, appID: try admin.requiredApp(named: app).id, audit: AuditAction.commandLine("entitlement.revoke"))
                print("revoked: \(revoked.id.canonical)  \(revoked.entitlement) of \(revoked.userIdentifier)")
            } catch EntitlementAdminError.grantNotFound {
                throw ValidationError("\(user) has no grant \(grant)")
            }
        }
    }

    struct Grants: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists one user's grants, newest first.")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The user's identifier.") var user: String

        func run() async throws {
            let admin = try appsAdmin()
            defer { admin.close() }
            let grants = try admin.entitlementGrants(appID: try admin.requiredApp(named: app).id, userIdentifier: user)
            if grants.isEmpty { print("No grants.") }
            let now = Date()
            for grant in grants {
                let state = grant.revokedAt.map { "revoked \($0) by \(grant.revokedBy ?? "?")" } ?? (grant.isActive(at: now) ? "active" : "expired")
                print(
                    "\(grant.id.canonical)  \(grant.entitlement)  \(grant.expiresAt.map { "until \($0)" } ?? "until revoked")  by \(grant.grantedBy)  \(state)\(grant.reason.map { "  \($0)" } ?? "")"
                )
            }
        }
    }
}
