import ArgumentParser
import Foundation
import Logging
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature

struct MockAppStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-appstore", abstract: "Runs the mock App Store (verifyReceipt) for development and benchmarks.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on.") var port = 9090
    @Option(help: "Latency added to every answer, in milliseconds.") var latencyMs = 0

    func run() async throws {
        let (_, logger) = try bootstrap(label: "mock-appstore")
        let state = MockAppStoreState(baseDelay: .milliseconds(latencyMs))
        try await ReceiptQueueApp.run(
            [MockAppStore.application(host: host, port: port, state: state, logger: logger)], logger: logger)
    }
}

struct Forge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Writes a unified receipt in Apple's format, signed by a local test CA (never Apple's).")

    @Option(help: "Bundle id of the receipt.") var bundleId: String
    @Option(help: "Receipt environment: Production, ProductionSandbox or Xcode.") var environment = "ProductionSandbox"
    @Option(
        name: .customLong("product"),
        help: "A purchase: PRODUCT_ID, or PRODUCT_ID:DAYS for a subscription expiring DAYS from now (negative = expired). Repeatable.")
    var products: [String] = []
    @Option(help: "Mock App Store directives carried in the receipt, e.g. status=21005,delay_ms=50.") var mock: String?
    @Option(help: "Directory of the test CA (created on first use).") var caDirectory = ".local/demo/forge-ca"
    @Option(help: "Signature digest: sha1 or sha256.") var digest = "sha256"
    @Flag(help: "Print a JSON request body ({\"receipt\": …}) instead of bare base64.") var json = false

    func run() async throws {
        guard let digest = PKCS7.DigestAlgorithm(rawValue: digest) else { throw ValidationError("--digest must be sha1 or sha256") }
        let now = Date()
        let base = UInt64(now.timeIntervalSince1970 * 1000)
        var purchases: [InAppPurchase] = []
        for (index, spec) in products.enumerated() {
            let parts = spec.split(separator: ":", maxSplits: 1).map(String.init)
            let id = "\(base)\(String(format: "%02d", index))"
            var purchase = InAppPurchase(
                quantity: 1, productID: parts[0], transactionID: id, originalTransactionID: id,
                purchaseDate: now.addingTimeInterval(-60), originalPurchaseDate: now.addingTimeInterval(-60))
            if parts.count == 2 {
                guard let days = Double(parts[1]) else { throw ValidationError("--product \(spec): DAYS must be a number") }
                purchase.expiresDate = now.addingTimeInterval(days * 86_400)
                purchase.webOrderLineItemID = id
            }
            purchases.append(purchase)
        }
        var receipt = ReceiptForger.demoReceipt(bundleID: bundleId, now: now)
        receipt.environment = ReceiptEnvironment(rawValue: environment)
        if !products.isEmpty { receipt.inApp = purchases }
        if let mock { receipt.opaqueValue = Array("mock:\(mock)".utf8) }
        let authority = try TestCertificateAuthority.loadOrCreate(directory: URL(fileURLWithPath: caDirectory))
        let encoded = Data(try ReceiptForger.unified(receipt, authority: authority, digest: digest)).base64EncodedString()
        print(json ? "{\"receipt\":\"\(encoded)\"}" : encoded)
    }
}

struct ReceiptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt", abstract: "Works with receipts locally.", subcommands: [Inspect.self])

    struct Inspect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Decodes a receipt (base64, from FILE or stdin) and prints it as JSON.")
        @Argument(help: "A file with the base64 receipt, or - for standard input.") var file = "-"

        func run() async throws {
            let data = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: file))
            do {
                let receipt = try ReceiptDecoder.decode(base64: String(decoding: data, as: UTF8.self))
                let resource: JSONValue = .object([
                    "style": .string(receipt.style.rawValue),
                    "bundle_id": .string(receipt.bundleID),
                    "environment": .string(receipt.environment.rawValue),
                    "application_version": receipt.applicationVersion.map(JSONValue.string) ?? .null,
                    "original_application_version": receipt.originalApplicationVersion.map(JSONValue.string) ?? .null,
                    "creation_date": receipt.creationDate.map { .string(ISO8601DateFormatter().string(from: $0)) } ?? .null,
                    "in_app": .array(receipt.inApp.map(\.appleJSON)),
                ])
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
                print(String(decoding: try encoder.encode(resource), as: UTF8.self))
            } catch let error as ReceiptDecodingError {
                FileHandle.standardError.write(Data("receiptq: not a receipt: \(error.reason)\n".utf8))
                throw ExitCode(2)
            }
        }
    }
}
