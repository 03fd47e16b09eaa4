import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

extension Apps {
    struct SetJWSTrust: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "jws-trust",
            abstract: "Sets how far an app trusts a StoreKit 2 transaction verified at the door (the Apple calls per validation).",
            discussion: """
                --trust local stores a verified transaction Apple signed within the freshness window without any call to \
                Apple; apple asks Apple once per purchase (Get Transaction Info, or a subscription's statuses); default is \
                local for an app whose notification URL (V2) is set up, else apple. --freshness-hours (default 24) is the \
                window after the transaction's signedDate. Options left out keep their value.
                """)
        @Option(help: "The app's name.") var name: String
        @Option(help: "local, apple or default.") var trust: String?
        @Option(help: "Hours after Apple signed a transaction that it may be trusted locally (default 24).") var freshnessHours: Double?

        func run() async throws {
            let choice = try trust.map { text in
                guard let value = JWSTrustChoice(rawValue: text) else { throw ValidationError("--trust must be local, apple or default") }
                return value
            }
            let freshness = try freshnessHours.map { hours in
                guard hours.isFinite, hours > 0, hours <= 24 * 365 else {
                    throw ValidationError("--freshness-hours must be a number of hours in (0, 8760]")
                }
                return hours * 3600
            }
            let admin = try appsAdmin()
            defer { admin.close() }
            let app = try admin.requiredApp(named: name)
            try admin.setJWSTrust(appID: app.id, trust: choice, freshness: freshness, audit: AuditAction.commandLine("app.jws_trust"))
            guard let updated = try admin.app(named: name) else { return }
            print(Self.describe(updated))
        }

        /// The app's call-budget settings as `apps list` shows them.
        static func describe(_ app: AppRecord) -> String {
            let hours = app.jwsTrust.freshness / 3600
            let window = hours == hours.rounded() ? String(Int(hours)) : String(hours)
            return "\(app.name): jws_trust \(app.effectiveJWSTrust.rawValue)\(app.jwsTrust.trust == nil ? " (default)" : ""), freshness \(window)h"
        }
    }

    struct Resync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Reads a customer's whole transaction history again (from its first page) and stores it.",
            discussion: """
                Queues a normal validation job through the queue (a worker runs it): the stored history revision of the \
                customer is not used, and the read's end replaces it. Audited as customer.resync. Prints the job's id.
                """)
        @Option(help: "The app's name.") var name: String
        @Option(help: "The customer's original transaction id.") var originalTransactionId: String
        @Option(help: "production or sandbox (default: production, then the sandbox).") var environment: String?
        @Option(help: "The user the receipt is filed for.") var userIdentifier: String?

        func run() async throws {
            let runtime = try ReceiptQueueApp.Runtime.bootstrap(label: "apps")
            let admin = try runtime.admin(label: "apps")
            let app: AppRecord
            do {
                defer { admin.close() }
                app = try admin.requiredApp(named: name)
            }
            let request: ResyncRequest
            do {
                request = try ResyncRequest.validated(
                    appID: app.id, originalTransactionID: originalTransactionId, environment: environment, userIdentifier: userIdentifier)
            } catch {
                throw ValidationError("--\(error.field.replacingOccurrences(of: "_", with: "-")) \(error.reason)")
            }
            do {
                let id = try await ReceiptQueueApp.resync(
                    request, configuration: runtime.configuration, audit: AuditAction.commandLine("customer.resync"), logger: runtime.logger)
                print("queued: \(id.uuidString.lowercased())")
            } catch let failure as ResyncFailure {
                switch failure {
                case .unknownApp: throw ValidationError("no app named \(name)")
                case .noServerAPIKey: throw ValidationError("\(name) has no In-App Purchase key: add one with `receiptq apps server-api-key`")
                case .unavailable: throw ValidationError("Redis or Postgres did not answer: nothing was queued, try again")
                }
            }
        }
    }
}
