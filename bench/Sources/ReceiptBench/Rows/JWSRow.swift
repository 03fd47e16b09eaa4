import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature

/// `jws`: the CPU cost of checking one StoreKit 2 signed transaction, as the front door of
/// `POST /client/transactions` and a worker reading Apple's answers do.
///
/// Four operations, interleaved per workload, each timed with the thread's CPU clock:
/// - `parse`: ``CompactJWS`` (header, `x5c` base64, signature shape) and the payload's JSON;
/// - `es256`: the ECDSA P-256 verification alone, with the leaf's key already in hand: the floor;
/// - `verify`: ``JWSVerifier/verify(_:)`` end to end (the chain from the shared cache after the
///   first call, markers, ES256);
/// - `verify+model`: `verify`, then Apple's typed transaction model and the purchase it becomes.
///
/// Workloads: a transaction signed now by a generated Apple-shaped chain (the mock's), and, when the
/// shared corpus is there, Apple's own signed transaction nested in a real notification (judged at
/// its `signedDate`, as a deployment does).
enum JWSRow: BenchRow {
    static let name = "jws"
    static let summary = "verify one StoreKit 2 signed transaction (cached chain): mock chain, Apple's real one (CPU µs; target < 100)"
    static let options = [
        OptionSpec(name: "--testdata", takesValue: true, help: "the App Store corpus (default ../shared/testdata/appstore)")
    ]
    static let defaultIterations = 3_000
    /// The target for `verify` p50, CPU time on one core.
    static let targetMicros = 100.0

    struct Workload {
        var key: String
        var jws: String
        var verifier: JWSVerifier
        var leafKey: PublicKey
        var signingInput: [UInt8]
        var signature: [UInt8]
    }

    enum Operation: String, CaseIterable {
        case parse, es256, verify
        case verifyModel = "verify+model"
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let iterations = options.iterations(default: defaultIterations)
        let warmup = options.warmup(forIterations: iterations)
        var workloads = [try mockWorkload()]
        var corpusNote = "corpus: absent; mock chain only"
        if let corpus = ReceiptRow.corpusDirectory(options), let apple = try appleWorkload(corpus) {
            workloads.append(apple)
            corpusNote = "corpus: \(corpus.path)"
        }
        for workload in workloads {
            // A workload whose JWS does not verify would time the refusal path: say so, loudly.
            if case .failure(let failure) = workload.verifier.verify(workload.jws) {
                throw BenchFailure(description: "\(workload.key): the JWS does not verify (\(failure.reason))")
            }
        }

        let items = workloads.indices.flatMap { index in Operation.allCases.map { (index, $0) } }
        let samples = Sampler.measureRoundRobin(items, warmup: warmup, iterations: iterations) { index, operation in
            let workload = workloads[index]
            switch operation {
            case .parse:
                guard let jws = try? CompactJWS(workload.jws) else { return }
                blackHole(try? JSONValue.parse(jws.payload))
            case .es256:
                blackHole(ES256.verify(signature: workload.signature, of: workload.signingInput, key: workload.leafKey))
            case .verify:
                blackHole(workload.verifier.verify(workload.jws))
            case .verifyModel:
                guard case .success(let verified) = workload.verifier.verify(workload.jws) else { return }
                blackHole(try? JWSTransactionPayload(json: verified.payload))
                blackHole(InAppPurchase(serverAPITransaction: verified.payload))
            }
        }

        var table = TextTable(
            title: "jws: CPU µs per signed transaction (thread CPU time; \(iterations) samples after \(warmup) warm-up)",
            headers: ["workload", "bytes", "parse p50", "es256 p50", "verify p10", "p50", "p90", "p99", "verify+model p50", "ops/s/core", "target"])
        var result: [String: Any] = [
            "iterations": iterations, "warmup": warmup, "target_verify_us_p50": targetMicros,
            "clock": "CLOCK_THREAD_CPUTIME_ID per operation",
        ]
        for (index, workload) in workloads.enumerated() {
            func distribution(_ operation: Operation) -> Distribution {
                let position = items.firstIndex { $0.0 == index && $0.1 == operation }!
                return Distribution(nanoseconds: samples[position].cpu)
            }
            let parse = distribution(.parse)
            let es256 = distribution(.es256)
            let verify = distribution(.verify)
            let model = distribution(.verifyModel)
            table.add([
                workload.key, "\(workload.jws.utf8.count)", Format.micros(parse.p50), Format.micros(es256.p50), Format.micros(verify.p10),
                Format.micros(verify.p50), Format.micros(verify.p90), Format.micros(verify.p99), Format.micros(model.p50),
                Format.rate(verify.opsPerSecond), verify.p50 < targetMicros ? "met" : "MISSED",
            ])
            result[workload.key] = [
                "bytes": workload.jws.utf8.count,
                "parse_us_p50": Format.json(parse.p50), "es256_us_p50": Format.json(es256.p50),
                "verify_us_p10": Format.json(verify.p10), "verify_us_p50": Format.json(verify.p50),
                "verify_us_p90": Format.json(verify.p90), "verify_us_p99": Format.json(verify.p99),
                "verify_model_us_p50": Format.json(model.p50),
                "verify_over_es256": Format.json(verify.p50 / es256.p50, places: 100),
                "verify_ops_per_s_one_core": Format.json(verify.opsPerSecond, places: 1),
            ]
        }
        table.notes = [
            "parse = CompactJWS + JSONValue.parse of the payload; es256 = ECDSA P-256 verify alone (the floor); verify = JWSVerifier.verify, chain cached",
            "verify+model = verify, then JWSTransactionPayload and InAppPurchase(serverAPITransaction:)",
            "target: verify p50 < \(Int(targetMicros)) µs CPU on one core; p10 is the least disturbed by other load",
            corpusNote,
        ]
        print(table.render())
        return result
    }

    // MARK: - Workloads

    static func mockWorkload() throws -> Workload {
        let authority = try MockAppleJWSAuthority.generate()
        let (jws, _) = try ReceiptForger.signedTransaction(
            bundleID: "com.example.bench", productID: "com.example.bench.monthly", days: 30, authority: authority)
        return try workload(
            key: "mock_chain", jws: jws, verifier: JWSVerifier(trustStore: TrustStore(roots: [authority.root])), leaf: authority.leaf)
    }

    /// Apple's signed transaction inside the CONSUMPTION_REQUEST notification of the corpus.
    static func appleWorkload(_ corpus: URL) throws -> Workload? {
        let file = corpus.appendingPathComponent("notifications/gopay-v2-consumption_request-production.json")
        let root = corpus.appendingPathComponent("certs/AppleRootCA-G3.pem")
        guard let data = try? Data(contentsOf: file), FileManager.default.fileExists(atPath: root.path),
            let notification = try? CompactJWS((try JSONDecoder().decode(JSONValue.self, from: data))["signedPayload"]?.stringValue ?? ""),
            let payload = try? JSONDecoder().decode(JSONValue.self, from: Data(notification.payload)),
            let nested = payload["data"]?["signedTransactionInfo"]?.stringValue,
            let leafDER = try CompactJWS(nested).x5c.first
        else { return nil }
        let verifier = JWSVerifier(trustStore: TrustStore(roots: try Certificate.loadAll(pemFile: root.path)))
        return try workload(key: "apple_chain", jws: nested, verifier: verifier, leaf: try Certificate(der: leafDER))
    }

    static func workload(key: String, jws: String, verifier: JWSVerifier, leaf: Certificate) throws -> Workload {
        let parsed = try CompactJWS(jws)
        return Workload(
            key: key, jws: jws, verifier: verifier, leafKey: try leaf.publicKey, signingInput: parsed.signingInput, signature: parsed.signature)
    }
}
