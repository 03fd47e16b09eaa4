import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

/// `receiptq customers …`: a customer's data, for the requests the law gives them.
struct CustomersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "customers", abstract: "A customer's data: everything receiptq holds about one user, exported or erased.",
        subcommands: [Export.self, Erase.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Writes everything held about a user (and every id merged with it) as one JSON document, audited.")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The user identifier.") var user: String
        @Option(help: "The file to write (default: standard output).") var output: String?

        func run() async throws {
            guard !user.isEmpty, user.unicodeScalars.count <= 255 else { throw ValidationError("--user must be 1 to 255 characters") }
            let admin = try appsAdmin()
            defer { admin.close() }
            let appID = try admin.requiredApp(named: app).id
            let handle: FileHandle
            if let output {
                guard FileManager.default.createFile(atPath: output, contents: nil) else { throw ValidationError("cannot write \(output)") }
                handle = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
            } else {
                handle = FileHandle.standardOutput
            }
            defer { if output != nil { try? handle.close() } }
            let audit = AuditAction.commandLine("customer.export").on(app: appID, target: "user \(user)", users: [user])
            try await admin.exportCustomer(appID: appID, userIdentifier: user, audit: audit) { piece in handle.write(Data(piece.utf8)) }
            if output == nil { handle.write(Data("\n".utf8)) }
        }
    }

    struct Erase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Erases a user (and every id merged with it): rows deleted or anonymised, jobs dropped, audited without the user.")
        @Option(help: "The app's name.") var app: String
        @Option(help: "The user identifier.") var user: String

        func run() async throws {
            guard !user.isEmpty, user.unicodeScalars.count <= 255 else { throw ValidationError("--user must be 1 to 255 characters") }
            let admin = try appsAdmin()
            defer { admin.close() }
            let appID = try admin.requiredApp(named: app).id
            guard let (erased, dropped) = try await admin.eraseCustomer(appID: appID, userIdentifier: user, audit: .commandLine("customer.erase"))
            else {
                // Idempotent: a second erasure finds nothing, which is what was asked.
                print("nothing held for that user (never seen, or erased already)")
                return
            }
            print("erasure \(erased.erasureID.canonical): \(erased.userIdentifiers.count) user id(s) erased, \(dropped) job(s) dropped")
        }
    }
}
