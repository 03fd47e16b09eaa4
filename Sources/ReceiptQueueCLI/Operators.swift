import ArgumentParser
import Foundation
import ReceiptCore
import ReceiptQueueApp

/// `receiptq operators`: named accounts for the dashboard and the admin API.
struct OperatorsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "operators", abstract: "Named dashboard and admin API accounts, with roles and an audit log.",
        discussion: """
            Roles: viewer (looks), operator (also retries and deletes jobs), admin (also manages webhooks). Passwords are stored
            as scrypt hashes; they come from RECEIPTQ_OPERATOR_PASSWORD, a prompt, or standard input — never an argument.
            DASHBOARD_USERNAME / DASHBOARD_PASSWORD stay one built-in admin. Every change is written to the audit log.
            """,
        subcommands: [Add.self, List.self, Remove.self, Reset.self, Audit.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Adds an account.")
        @Argument(help: "The username (letters, digits, . _ - @; compared case-insensitively).") var username: String
        @Option(help: "viewer, operator or admin.") var role: String = "viewer"

        func run() async throws {
            let role = try parseRole(role)
            try withOperators { admin in
                guard !admin.isBuiltInAdmin(username) else {
                    throw ValidationError(OperatorAdminError.reserved.description)
                }
                let hash = try newPasswordHash(admin)
                try admin.addOperator(username: username, role: role, passwordHash: hash, audit: AuditAction.commandLine("operator.add"))
                print("Added \(username.lowercased()) (\(role.rawValue)).")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists the accounts and their roles.")

        func run() async throws {
            try withOperators { admin in
                print("\(admin.builtInAdminUsername)  admin  (built in: DASHBOARD_USERNAME)")
                for account in try admin.listOperators() {
                    print("\(account.username)  \(account.role.rawValue)  since \(APITimestamp(account.createdAt).utc)")
                }
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Removes an account; its sessions end at once.")
        @Argument(help: "The username.") var username: String

        func run() async throws {
            try withOperators { admin in
                try admin.removeOperator(username: username, audit: AuditAction.commandLine("operator.remove"))
                print("Removed \(username.lowercased()).")
            }
        }
    }

    struct Reset: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sets a new password (and, with --role, a new role); the account's sessions end at once.")
        @Argument(help: "The username.") var username: String
        @Option(help: "A new role: viewer, operator or admin.") var role: String?
        @Flag(help: "Change only the role, keep the password.") var keepPassword = false

        func run() async throws {
            let newRole = try role.map(parseRole)
            guard !keepPassword || newRole != nil else { throw ValidationError("--keep-password needs --role") }
            try withOperators { admin in
                let hash = keepPassword ? nil : try newPasswordHash(admin)
                try admin.resetOperator(username: username, passwordHash: hash, role: newRole, audit: AuditAction.commandLine("operator.reset"))
                print("Reset \(username.lowercased())\(newRole.map { " (now \($0.rawValue))" } ?? ""): its sessions have ended.")
            }
        }
    }

    struct Audit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Prints the audit log, newest first.")
        @Option(help: "Only this actor's actions.") var actor: String?
        @Option(help: "Only this action, or a family ending in a dot (dead.).") var action: String?
        @Option(help: "Only actions that touched this customer.") var user: String?
        @Option(help: "How many lines.") var limit: Int = 50

        func run() async throws {
            try withOperators { admin in
                let entries = try admin.audit(AuditFilter(actor: actor, action: action, userIdentifier: user), limit: max(1, min(limit, 1000)))
                if entries.isEmpty { print("The audit log is empty.") }
                for entry in entries {
                    let jobs = entry.jobCount.map { "  jobs: \($0)" } ?? ""
                    print(
                        "\(APITimestamp(entry.at).utc)  \(entry.actor)\(entry.role.map { " (\($0))" } ?? "")  \(entry.action)  via \(entry.source)\(entry.clientAddress.map { " from \($0)" } ?? "")  \(entry.target ?? "")\(jobs)  \(entry.outcome)"
                    )
                }
            }
        }
    }
}

private func parseRole(_ text: String) throws -> OperatorRole {
    guard let role = OperatorRole(rawValue: text.lowercased()) else { throw ValidationError("--role is viewer, operator or admin") }
    return role
}

/// A new password, read as ``readPassword(variable:label:)`` does, hashed (a short one is refused).
private func newPasswordHash(_ admin: ReceiptQueueApp.Admin) throws -> String {
    try admin.operatorPasswordHash(try readPassword(variable: "RECEIPTQ_OPERATOR_PASSWORD", label: "Password"))
}

/// Runs `body` with the administration on a fresh connection; its errors as the CLI's.
private func withOperators(_ body: (ReceiptQueueApp.Admin) throws -> Void) throws {
    let admin = try ReceiptQueueApp.Runtime.bootstrap(label: "operators").admin(label: "operators")
    defer { admin.close() }
    do {
        try body(admin)
    } catch let error as OperatorAdminError {
        throw ValidationError(error.description)
    }
}

/// A password from the environment `variable`, or typed without echo (twice) at a terminal, or
/// the first line of standard input when it is not one: never an argument, which `ps` would show.
func readPassword(variable: String, label: String) throws -> String {
    if let password = ProcessInfo.processInfo.environment[variable], !password.isEmpty { return password }
    guard isatty(STDIN_FILENO) == 1 else {
        guard let line = readLine(strippingNewline: true), !line.isEmpty else {
            throw ValidationError("no password: set \(variable) or pipe it on standard input")
        }
        return line
    }
    func prompt(_ text: String) -> String? {
        FileHandle.standardError.write(Data(text.utf8))
        var saved = termios()
        tcgetattr(STDIN_FILENO, &saved)
        var silent = saved
        silent.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
        defer {
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
            FileHandle.standardError.write(Data("\n".utf8))
        }
        return readLine(strippingNewline: true)
    }
    guard let password = prompt("\(label): "), !password.isEmpty else { throw ValidationError("the password must not be empty") }
    guard prompt("Again: ") == password else { throw ValidationError("the passwords differ") }
    return password
}
