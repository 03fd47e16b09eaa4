import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

extension Apps {
    struct SetTransferRule: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "transfer-rule",
            abstract: "Sets what happens when a second user presents a transaction another user owns.",
            discussion: """
                keep_first (the default): the first user keeps it and the second is flagged (purchase.conflict); \
                transfer_to_latest: the newer user takes it and its subscription, and both get customer.transferred; \
                share: both are entitled. Applies to transactions presented from then on. Audited as app.transfer_rule. \
                Without --rule, prints the app's rule.
                """)
        @Option(help: "The app's name.") var app: String
        @Option(help: "keep_first, transfer_to_latest or share.") var rule: String?

        func run() async throws {
            let choice = try rule.map { text in
                guard let value = TransferRule(rawValue: text) else {
                    throw ValidationError("--rule must be keep_first, transfer_to_latest or share")
                }
                return value
            }
            let admin = try appsAdmin()
            defer { admin.close() }
            let record = try admin.requiredApp(named: app)
            if let choice {
                try admin.setTransferRule(choice, appID: record.id, audit: AuditAction.commandLine("app.transfer_rule"))
            }
            print("\(record.name): transfer_rule \(try admin.transferRule(appID: record.id).rawValue)")
        }
    }
}
