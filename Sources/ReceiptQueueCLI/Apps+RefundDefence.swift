import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

extension Apps {
    /// `apps consumption-policy`: how the app answers Apple's consumption requests.
    struct ConsumptionPolicyCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "consumption-policy",
            abstract: "Sets how an app answers Apple's CONSUMPTION_REQUEST (a customer asked for a refund).",
            discussion: """
                off (the default) sends nothing; neutral sends the facts without a preference; prefer_decline asks Apple to \
                decline the refund of a delivered purchase; prefer_grant asks for a refund (prorated once the customer used \
                the purchase or was refunded before). Nothing is sent for a customer whose consent the app did not post.
                """)
        @Option(help: "The app's name.") var app: String
        @Option(help: "off, neutral, prefer_decline or prefer_grant.") var policy: String

        func run() async throws {
            guard let chosen = ConsumptionPolicy(rawValue: policy) else {
                throw ValidationError("--policy must be off, neutral, prefer_decline or prefer_grant")
            }
            let admin = try appsAdmin()
            defer { admin.close() }
            let record = try admin.requiredApp(named: app)
            try admin.setConsumptionPolicy(appID: record.id, policy: chosen, audit: AuditAction.commandLine("app.consumption_policy"))
            print("\(record.name): consumption policy \(chosen.rawValue)")
        }
    }
}
