import DevTools
import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature

/// `receipt`: the CPU cost of turning one base64 receipt into a trusted ``AppReceipt``.
///
/// Three operations, each timed per receipt with the thread's CPU clock (and the wall clock):
/// - `decode`: base64 text → bytes → ``AppReceipt`` (what the ingest API does per request);
/// - `verify`: ``ReceiptSignatureVerifier/verify(bytes:receipt:time:)`` alone, on decoded input;
/// - `decode+verify`: both, from the base64 text: the cost the issue's target is about.
///
/// Workloads: a forged ~4 KB unified receipt (SHA-256, signed by a generated test CA), every real
/// unified receipt of the shared corpus, and its iOS 6 transaction receipts. The corpus is read in
/// place from `../shared/testdata/appstore` (or `--testdata`, or `RECEIPTQ_TESTDATA`); without it
/// only the forged workload runs.
enum ReceiptRow: BenchRow {
    static let name = "receipt"
    static let summary = "decode / signature-verify one receipt: forged 4 KB unified, real unified, real iOS 6 (CPU µs)"
    static let options = [
        OptionSpec(name: "--testdata", takesValue: true, help: "the App Store corpus (default ../shared/testdata/appstore)"),
        OptionSpec(name: "--forged-only", takesValue: false, help: "skip the real receipts even when present"),
        OptionSpec(
            name: "--workload", takesValue: true,
            help: "only this workload: forged_unified, real_unified or real_transaction (for profiling)"),
    ]

    /// One receipt as the bench feeds it: the base64 text a client sends, and what it decodes to.
    struct Case {
        var name: String
        var text: String
        var bytes: [UInt8]
        var receipt: AppReceipt
        var verifier: ReceiptSignatureVerifier
        var signature: SignatureResult
    }

    struct Workload {
        var key: String
        var cases: [Case]
    }

    /// Timings of one case.
    struct Measured {
        var decode: Distribution
        var verify: Distribution
        var decodeVerify: Distribution
        var decodeVerifyWall: Distribution
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let iterations = options.iterations(default: defaultIterations)
        let warmup = options.warmup(forIterations: iterations)

        var result: [String: Any] = [:]
        let only = options.extra["--workload"]
        // The forged workload's CA costs two RSA key generations: skip it when not asked for (profiling).
        var workloads = only == nil || only == "forged_unified" ? [try forgedWorkload()] : []
        var corpusNote = options.has("--forged-only") ? "corpus: not used (--forged-only)" : "corpus: not used (--workload)"
        if !options.has("--forged-only"), only.map({ $0.hasPrefix("real_") }) ?? true {
            if let corpus = corpusDirectory(options) {
                workloads += try realWorkloads(corpus)
                corpusNote = "corpus: \(corpus.path)"
                result["corpus"] = corpus.path
            } else {
                corpusNote = "corpus: absent (../shared/testdata/appstore); forged receipt only"
            }
        }

        if let only {
            workloads = workloads.filter { $0.key == only }
            guard !workloads.isEmpty else { throw BenchFailure(description: "no workload named \(only) (or its corpus is absent)") }
            result["partial"] = true
        }

        let overhead = Sampler.timerOverhead()
        var table = TextTable(
            title: "receipt: CPU µs per receipt (thread CPU time; \(iterations) samples per receipt after \(warmup) warm-up)",
            headers: [
                "workload", "n", "ok", "bytes", "decode p50", "verify p50", "dec+ver p10", "p50", "p90", "p99", "wall p50", "ops/s/core",
            ])
        result.merge([
            "iterations": iterations, "warmup": warmup, "timer_overhead_us_p50": Format.json(overhead.p50, places: 1_000),
            "clock": "CLOCK_THREAD_CPUTIME_ID per operation; wall = CLOCK_MONOTONIC",
            "aggregation": "per-receipt percentiles, then the median across the workload's receipts",
        ]) { _, new in new }
        var details: [TextTable] = []
        for workload in workloads {
            FileHandle.standardError.write(Data("receipt: measuring \(workload.key) (\(workload.cases.count) receipts)…\n".utf8))
            let measured = measure(workload, warmup: warmup, iterations: iterations)
            let summary = aggregate(workload, measured)
            result[workload.key] = summary
            let valid = workload.cases.filter(\.signature.valid).count
            table.add([
                workload.key, "\(workload.cases.count)", "\(valid)", "\(median(workload.cases.map { Double($0.bytes.count) }).map { Int($0) } ?? 0)",
                Format.micros(summary["decode_us_p50"] as? Double ?? .nan),
                Format.micros(summary["verify_us_p50"] as? Double ?? .nan),
                Format.micros(summary["decode_verify_us_p10"] as? Double ?? .nan),
                Format.micros(summary["decode_verify_us_p50"] as? Double ?? .nan),
                Format.micros(summary["decode_verify_us_p90"] as? Double ?? .nan),
                Format.micros(summary["decode_verify_us_p99"] as? Double ?? .nan),
                Format.micros(summary["decode_verify_wall_us_p50"] as? Double ?? .nan),
                Format.rate(summary["decode_verify_ops_per_s_one_core"] as? Double ?? .nan),
            ])
            if workload.cases.count > 1 {
                details.append(detailTable(workload, measured))
            } else if let item = workload.cases.first {
                table.notes.append(
                    "\(workload.key): \(item.name), \(item.bytes.count) bytes, \(item.receipt.inApp.count) purchases, "
                        + "signed \(item.signature.digest ?? "?") by a generated 2-certificate test CA")
            }
            for invalid in workload.cases where !invalid.signature.valid {
                table.notes.append("\(workload.key)/\(invalid.name): signature not valid (\(invalid.signature.reason ?? "?")), timed anyway")
            }
        }
        table.notes.insert(
            contentsOf: [
                "n = receipts, ok = signatures valid; multi-receipt workloads show the median over receipts of each percentile",
                "decode = base64 + ReceiptDecoder.decode(bytes:); verify = ReceiptSignatureVerifier.verify alone; dec+ver = both",
                "p10 is the least disturbed by other load (this VM's CPU time is bimodal under host contention)",
                "ops/s/core = 1e6 / dec+ver p50; timer overhead \(Format.json(overhead.p50, places: 1_000)) µs per sample (included)",
                corpusNote,
            ], at: 0)
        print(table.render())
        if options.detail {
            for detail in details { print("\n" + detail.render()) }
        }
        return result
    }

    // MARK: - Measuring

    /// The three operations, interleaved per receipt (decode, verify, both; next receipt; …) so that a
    /// change in the machine's load hits them alike and their ratios stay meaningful.
    enum Operation: CaseIterable {
        case decode, verify, decodeVerify
    }

    static func measure(_ workload: Workload, warmup: Int, iterations: Int) -> [Measured] {
        let cases = workload.cases
        let items = cases.indices.flatMap { index in Operation.allCases.map { (index, $0) } }
        let samples = Sampler.measureRoundRobin(items, warmup: warmup, iterations: iterations) { index, operation in
            let item = cases[index]
            switch operation {
            case .decode:
                blackHole(try? ReceiptDecoder.decode(bytes: ReceiptDecoder.base64Bytes(item.text)))
            case .verify:
                blackHole(item.verifier.verify(bytes: item.bytes, receipt: item.receipt))
            case .decodeVerify:
                guard let bytes = try? ReceiptDecoder.base64Bytes(item.text), let receipt = try? ReceiptDecoder.decode(bytes: bytes)
                else { return }
                blackHole(item.verifier.verify(bytes: bytes, receipt: receipt))
            }
        }
        let perCase = Operation.allCases.count
        return cases.indices.map { index in
            let decode = samples[index * perCase]
            let verify = samples[index * perCase + 1]
            let both = samples[index * perCase + 2]
            return Measured(
                decode: Distribution(nanoseconds: decode.cpu), verify: Distribution(nanoseconds: verify.cpu),
                decodeVerify: Distribution(nanoseconds: both.cpu), decodeVerifyWall: Distribution(nanoseconds: both.wall))
        }
    }

    static func aggregate(_ workload: Workload, _ measured: [Measured]) -> [String: Any] {
        func across(_ value: (Measured) -> Double) -> Double { median(measured.map(value)) ?? .nan }
        let decodeVerifyP50 = across(\.decodeVerify.p50)
        var summary: [String: Any] = [
            "receipts": workload.cases.count,
            "valid": workload.cases.filter(\.signature.valid).count,
            "bytes_p50": Int(median(workload.cases.map { Double($0.bytes.count) }) ?? 0),
            "decode_us_p50": Format.json(across(\.decode.p50)),
            "decode_us_p90": Format.json(across(\.decode.p90)),
            "decode_us_p99": Format.json(across(\.decode.p99)),
            "verify_us_p50": Format.json(across(\.verify.p50)),
            "verify_us_p90": Format.json(across(\.verify.p90)),
            "verify_us_p99": Format.json(across(\.verify.p99)),
            "decode_verify_us_p10": Format.json(across(\.decodeVerify.p10)),
            "decode_verify_us_p50": Format.json(decodeVerifyP50),
            "decode_verify_us_p90": Format.json(across(\.decodeVerify.p90)),
            "decode_verify_us_p99": Format.json(across(\.decodeVerify.p99)),
            "decode_verify_wall_us_p50": Format.json(across(\.decodeVerifyWall.p50)),
            "decode_verify_wall_us_p99": Format.json(across(\.decodeVerifyWall.p99)),
            "decode_verify_ops_per_s_one_core": Format.json(1_000_000 / decodeVerifyP50, places: 1),
        ]
        if workload.cases.count > 1 {
            summary["decode_verify_us_p50_min"] = Format.json(measured.map(\.decodeVerify.p50).min() ?? .nan)
            summary["decode_verify_us_p50_max"] = Format.json(measured.map(\.decodeVerify.p50).max() ?? .nan)
        }
        var perReceipt: [String: Any] = [:]
        for (item, timing) in zip(workload.cases, measured) {
            var entry: [String: Any] = [
                "bytes": item.bytes.count, "purchases": item.receipt.inApp.count, "valid": item.signature.valid,
                "decode_us_p50": Format.json(timing.decode.p50), "verify_us_p50": Format.json(timing.verify.p50),
                "decode_verify_us_p10": Format.json(timing.decodeVerify.p10),
                "decode_verify_us_p50": Format.json(timing.decodeVerify.p50),
                "decode_verify_us_p99": Format.json(timing.decodeVerify.p99),
                "decode_verify_wall_us_p50": Format.json(timing.decodeVerifyWall.p50),
            ]
            if let digest = item.signature.digest { entry["digest"] = digest }
            if let reason = item.signature.reason { entry["reason"] = reason }
            perReceipt[item.name] = entry
        }
        summary["per_receipt"] = perReceipt
        return summary
    }

    static func detailTable(_ workload: Workload, _ measured: [Measured]) -> TextTable {
        var table = TextTable(
            title: "receipt/\(workload.key): per receipt (CPU µs)",
            headers: ["receipt", "bytes", "iap", "digest", "ok", "decode p50", "verify p50", "dec+ver p10", "p50", "p99", "wall p50"])
        for (item, timing) in zip(workload.cases, measured) {
            table.add([
                item.name, "\(item.bytes.count)", "\(item.receipt.inApp.count)", item.signature.digest ?? "-",
                item.signature.valid ? "yes" : (item.signature.reason ?? "no"),
                Format.micros(timing.decode.p50), Format.micros(timing.verify.p50), Format.micros(timing.decodeVerify.p10),
                Format.micros(timing.decodeVerify.p50),
                Format.micros(timing.decodeVerify.p99), Format.micros(timing.decodeVerifyWall.p50),
            ])
        }
        return table
    }

    static func median(_ values: [Double]) -> Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    // MARK: - Workloads

    /// A unified receipt signed with SHA-256 by a freshly generated test CA, grown purchase by
    /// purchase (2…10) until it is about 4 KB, the size of a typical real receipt's payload + chain.
    static func forgedWorkload() throws -> Workload {
        let authority = try TestCertificateAuthority.generate()
        let verifier = ReceiptSignatureVerifier(trustStore: TrustStore(roots: [authority.root]))
        let bytes = try ForgedReceipt.fourKilobytes(bundleID: "com.example.receiptq.bench", authority: authority).der
        let text = Data(bytes).base64EncodedString()
        let decoded = try ReceiptDecoder.decode(base64: text)
        let signature = verifier.verify(bytes: bytes, receipt: decoded)
        guard signature.valid else {
            throw BenchFailure(description: "the forged receipt does not verify (\(signature.reason ?? "?")); the bench would time a failure path")
        }
        let name = "forged-\(decoded.inApp.count)iap-sha256"
        return Workload(
            key: "forged_unified",
            cases: [Case(name: name, text: text, bytes: bytes, receipt: decoded, verifier: verifier, signature: signature)])
    }

    /// The shared corpus: `--testdata`, else `RECEIPTQ_TESTDATA`, else `../shared/testdata/appstore`
    /// seen from the current directory (scripts/bench runs from the repository root) or from this file.
    static func corpusDirectory(_ options: BenchOptions) -> URL? {
        if let explicit = options.extra["--testdata"] ?? ProcessInfo.processInfo.environment["RECEIPTQ_TESTDATA"] {
            return URL(fileURLWithPath: explicit)
        }
        var fromSource = URL(fileURLWithPath: #filePath)
        for _ in 0..<5 { fromSource.deleteLastPathComponent() }  // bench/Sources/ReceiptBench/Rows/<file> → repository root
        let candidates = [
            URL(fileURLWithPath: FileManager.default.currentDirectoryPath).deletingLastPathComponent(),
            fromSource.deletingLastPathComponent(),
        ]
        return candidates.map { $0.appendingPathComponent("shared/testdata/appstore") }
            .first { FileManager.default.fileExists(atPath: $0.appendingPathComponent("receipts").path) }
    }

    /// Apple's trust anchors, chosen explicitly: the two roots, and the WWDR + iTunes Store CAs as
    /// intermediates (not the corpus's leaf, test-CA or StoreKit certificates).
    static func appleTrustStore(_ corpus: URL) throws -> TrustStore {
        let certs = corpus.appendingPathComponent("certs")
        func load(_ file: String) throws -> [Certificate] {
            try Certificate.loadAll(pemFile: certs.appendingPathComponent(file).path)
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: certs.path).sorted()
        let roots = try ["AppleIncRootCertificate.pem", "AppleRootCA-G3.pem"].filter(files.contains).flatMap(load)
        let intermediates = try files.filter { $0.hasPrefix("AppleWWDR") || $0 == "AppleiTunesStoreCertificationAuthority.pem" }
            .flatMap(load)
        guard !roots.isEmpty else { throw BenchFailure(description: "no Apple root certificate in \(certs.path)") }
        return TrustStore(roots: roots, intermediates: intermediates)
    }

    static func realWorkloads(_ corpus: URL) throws -> [Workload] {
        let verifier = ReceiptSignatureVerifier(trustStore: try appleTrustStore(corpus))
        let folder = corpus.appendingPathComponent("receipts")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".b64") }.sorted()
        var unified: [Case] = []
        var transaction: [Case] = []
        for name in names {
            let text = try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
            // Receipts that do not decode (none in the corpus today) are not this row's business.
            guard let bytes = try? ReceiptDecoder.base64Bytes(text), let receipt = try? ReceiptDecoder.decode(bytes: bytes) else {
                FileHandle.standardError.write(Data("receipt: skipping \(name): does not decode\n".utf8))
                continue
            }
            let item = Case(
                name: String(name.dropLast(4)), text: text, bytes: bytes, receipt: receipt, verifier: verifier,
                signature: verifier.verify(bytes: bytes, receipt: receipt))
            switch receipt.style {
            case .unified: unified.append(item)
            case .transaction: transaction.append(item)
            }
        }
        return [
            Workload(key: "real_unified", cases: unified),
            Workload(key: "real_transaction", cases: transaction),
        ].filter { !$0.cases.isEmpty }
    }
}
