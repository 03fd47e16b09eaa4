import ArgumentParser
import Foundation
import ReceiptQueueApp

struct ReceiptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt", abstract: "Works with receipts locally.", subcommands: [Inspect.self])

    struct Inspect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Decodes a receipt or a StoreKit 2 JWS (from FILE or stdin), checks its signature, and prints one JSON object.",
            discussion: """
                A receipt is base64. A JWS (a signed transaction, a renewal info, or a notification's signedPayload, \
                also given as the notification's JSON body) prints {"kind", "payload", "signature": {"valid", "reason", \
                "chain"}}, with a notification's nested JWS decoded in place. Exit status 0 when it decoded (whatever \
                its signature), 2 when it is neither.
                """)

        @Argument(help: "A file with the base64 receipt or the JWS, or - for standard input.") var file = "-"
        @Option(help: "Directory of trusted PEM certificates (default: RECEIPTQ_TRUST_ROOTS_DIR).") var trustRoots: String?
        @Flag(help: "Judge certificates now instead of at the receipt's own date.") var now = false

        func run() async throws {
            let data: Data
            do {
                data =
                    file == "-"
                    ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: file))
            } catch {
                fail("cannot read \(file)")
            }
            do {
                print(try ReceiptQueueApp.inspect(data, trustRoots: trustRoots, judgeNow: now))
            } catch let failure as ReceiptQueueApp.InspectionFailure {
                fail(failure.description)
            }
        }

        /// One line on stderr and exit status 2, as the contract says.
        private func fail(_ message: String) -> Never {
            FileHandle.standardError.write(Data("receiptq: \(message)\n".utf8))
            Foundation.exit(2)
        }
    }
}
