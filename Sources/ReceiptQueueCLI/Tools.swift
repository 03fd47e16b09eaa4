import ArgumentParser
import Curl
import DevTools
import Foundation
import Logging
import MockAppStore
import OpenSSL
import ReceiptCore
import ReceiptQueueApp
import ReceiptSignature

struct MockAppStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-appstore", abstract: "Runs the mock App Store (verifyReceipt and the Server API) for development and benchmarks.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on.") var port = 9090
    @Option(help: "Latency added to every answer, in milliseconds.") var latencyMs = 0
    @Option(help: "Directory of the mock Apple JWS chain the Server API signs with (created on first use; default: a new chain per run).")
    var jwsCaDirectory: String?
    @Flag(help: "Answer every unknown numeric transaction id in production as a monthly subscription (load tests).")
    var synthesizeTransactions = false

    func run() async throws {
        let (_, logger) = try bootstrap(label: "mock-appstore")
        let authority = try jwsCaDirectory.map { try MockAppleJWSAuthority.loadOrCreate(directory: URL(fileURLWithPath: $0)) }
        let state = MockAppStoreState(baseDelay: .milliseconds(latencyMs), authority: authority)
        state.serverAPI.synthesizesUnknownTransactions = synthesizeTransactions
        try await ReceiptQueueApp.run(
            [MockAppStore.application(host: host, port: port, state: state, logger: logger)], logger: logger)
    }
}

struct Forge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Writes a unified receipt in Apple's format, signed by a local test CA (never Apple's).",
        discussion: """
            With --signed-transaction it writes a StoreKit 2 signed transaction instead (a compact JWS, for \
            POST /client/transactions), signed by the mock's Apple-shaped chain in --jws-ca-directory: the first \
            --product, in --environment Sandbox or Production. --register URL adds it to a running mock App Store's \
            Server API ledger (e.g. http://127.0.0.1:9090).
            """)

    @Option(help: "Bundle id of the receipt.") var bundleId: String
    @Option(help: "Receipt environment: Production, ProductionSandbox or Xcode.") var environment = "ProductionSandbox"
    @Option(
        name: .customLong("product"),
        help: "A purchase: PRODUCT_ID, or PRODUCT_ID:DAYS for a subscription expiring DAYS from now (negative = expired). Repeatable.")
    var products: [String] = []
    @Option(help: "Mock App Store directives carried in the receipt, e.g. status=21005,delay_ms=50.") var mock: String?
    @Option(help: "Directory of the test CA (created on first use).") var caDirectory = ".local/demo/forge-ca"
    @Option(help: "Signature digest: sha1 or sha256.") var digest = "sha256"
    @Option(help: "Receipt style: unified (iOS 7+) or transaction (iOS 6, first purchase only).") var style = "unified"
    @Flag(help: "Print a JSON request body ({\"receipt\": …}) instead of bare base64.") var json = false
    @Flag(help: "Write a StoreKit 2 signed transaction (JWS) instead of a receipt.") var signedTransaction = false
    @Option(help: "Directory of the mock Apple JWS chain (created on first use).") var jwsCaDirectory = ".local/demo/jws-ca"
    @Option(help: "With --signed-transaction: a mock App Store to register the transaction with.") var register: String?

    func run() async throws {
        if signedTransaction { return try await forgeSignedTransaction() }
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
        let bytes: [UInt8]
        switch style {
        case "unified": bytes = try ReceiptForger.unified(receipt, authority: authority, digest: digest)
        case "transaction": bytes = try ReceiptForger.transaction(receipt, authority: authority)
        default: throw ValidationError("--style must be unified or transaction")
        }
        let encoded = Data(bytes).base64EncodedString()
        print(json ? "{\"receipt\":\"\(encoded)\"}" : encoded)
    }

    private func forgeSignedTransaction() async throws {
        let spec = (products.first ?? "\(bundleId).product").split(separator: ":", maxSplits: 1).map(String.init)
        let days = try spec.count == 2 ? Double(spec[1]) ?? { throw ValidationError("--product \(spec[0]): DAYS must be a number") }() : nil
        let environmentName: String
        switch environment.lowercased() {
        case "sandbox", "productionsandbox": environmentName = "Sandbox"
        case "production": environmentName = "Production"
        default: throw ValidationError("--environment must be Sandbox or Production with --signed-transaction")
        }
        let authority = try MockAppleJWSAuthority.loadOrCreate(directory: URL(fileURLWithPath: jwsCaDirectory))
        let (jws, payload) = try ReceiptForger.signedTransaction(
            bundleID: bundleId, productID: spec[0], days: days, environment: environmentName, authority: authority)
        if let register {
            let body = try JSONEncoder().encode(JSONValue.object(["environment": .string(environmentName), "transactions": .array([payload])]))
            let client = try Curl.HTTPClient(options: CurlOptions(), lanes: 1)
            let status = try await client.send(
                Curl.HTTPRequest(
                    method: "POST", url: "\(register)/mock/server-api/transactions", headers: [(name: "Content-Type", value: "application/json")],
                    body: Array(body))
            ).status
            guard status == 201 else { throw ValidationError("the mock at \(register) did not take the transaction (HTTP \(status))") }
        }
        print(json ? String(decoding: try JSONEncoder().encode(JSONValue.object(["signed_transaction": .string(jws)])), as: UTF8.self) : jws)
    }
}

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
            let directory = trustRoots ?? ProcessInfo.processInfo.environment["RECEIPTQ_TRUST_ROOTS_DIR"]
            var verifier: ReceiptSignatureVerifier?
            if let directory, !directory.isEmpty {
                do {
                    verifier = ReceiptSignatureVerifier(trustStore: try TrustStore.load(directory: URL(fileURLWithPath: directory)))
                } catch {
                    fail("cannot load trusted certificates from \(directory)")
                }
            }
            let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            if let jws = Self.jws(in: text) {
                let jwsVerifier = try directory.flatMap { $0.isEmpty ? nil : $0 }.map {
                    JWSVerifier(trustStore: try TrustStore.load(directory: URL(fileURLWithPath: $0)), time: now ? .now : .receiptDate)
                }
                do {
                    print(Self.pretty(try JWSInspector.inspect(jws, verifier: jwsVerifier).json))
                } catch {
                    fail("not a JWS (\(error.reason))")
                }
                return
            }
            let bytes: [UInt8]
            let inspected: JSONValue
            do {
                bytes = try ReceiptDecoder.base64Bytes(String(decoding: data, as: UTF8.self))
                inspected = try ReceiptInspector.inspect(bytes: bytes, verifier: verifier, time: now ? .now : .receiptDate)
            } catch {
                fail("not an App Store receipt (\(error.reason))")
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(inspected), as: UTF8.self))
        }

        /// The compact JWS in `text`: the text itself, or a notification body's `signedPayload`.
        static func jws(in text: String) -> String? {
            if CompactJWS.looksLikeJWS(text) { return text }
            guard text.hasPrefix("{"), let json = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)),
                let payload = json["signedPayload"]?.stringValue, CompactJWS.looksLikeJWS(payload)
            else { return nil }
            return payload
        }

        static func pretty(_ json: JSONValue) -> String {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            return String(decoding: (try? encoder.encode(json)) ?? Data(), as: UTF8.self)
        }

        /// One line on stderr and exit status 2, as the issue's contract says.
        private func fail(_ message: String) -> Never {
            FileHandle.standardError.write(Data("receiptq: \(message)\n".utf8))
            Foundation.exit(2)
        }
    }
}
